"""`spotbench --help` answers at once: building the parser imports no heavy dependency (commands
import theirs when they run). Checked by what gets imported, not by a time limit."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "pyarrow", "ray", "transformers", "datasets")


def test_building_the_parser_imports_no_heavy_dependency() -> None:
    probe = (
        "import json, sys; from spotbench.cli import build_parser; build_parser(); "
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120).stdout
    )
    assert loaded == []
    # negative control: the probe sees a heavy import when one happens
    again = probe.replace("build_parser(); ", "build_parser(); import pyarrow; ")
    assert json.loads(
        subprocess.run([sys.executable, "-c", again], capture_output=True, text=True, check=True, timeout=120).stdout
    ) == ["pyarrow"]

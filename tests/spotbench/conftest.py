"""The check every malformed input must pass, as the fixture `clear_error`, and after a run that
included the test_malformed_*.py files: how many of their malformed inputs got a clear error (one
line, exit 2, nothing written), as 'X/Y'."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from spotbench.cli import main

CASE_TEST = "::test_malformed_input_is_one_clear_line["
"""The parametrised test of each tests/spotbench/test_malformed_*.py file, one case a node."""


def pytest_terminal_summary(terminalreporter) -> None:
    def cases(outcome: str) -> set[str]:
        return {r.nodeid for r in terminalreporter.stats.get(outcome, []) if CASE_TEST in getattr(r, "nodeid", "")}

    ran = cases("passed") | cases("failed") | cases("error")
    if ran:
        clear = cases("passed") - cases("failed") - cases("error")  # a teardown error fails a passed call
        terminalreporter.write_line(f"malformed inputs with clear errors {len(clear)}/{len(ran)}")


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture
def clear_error(tmp_path, monkeypatch, capsys) -> Callable[..., None]:
    """`clear_error(argv, message, files={})` runs the CLI in this process in an empty folder (the
    data dir its data/) after making `files` there, and checks the one clear line: exit 2, one stderr
    line `spotbench: error: ...` that holds `message` (a part naming the problem), no traceback, and
    nothing written (no run directory, checkpoint or output)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPOTBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def check(argv: list[str], message: str, files: dict[str, str | bytes] | None = None) -> None:
        for name, content in (files or {}).items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            getattr(tmp_path / name, "write_bytes" if isinstance(content, bytes) else "write_text")(content)
        before = _snapshot(tmp_path)
        assert main(argv) == 2
        _out, err = capsys.readouterr()
        assert err.startswith("spotbench: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert message in err, err
        assert _snapshot(tmp_path) == before  # nothing written: no run directory, checkpoint or output

    return check

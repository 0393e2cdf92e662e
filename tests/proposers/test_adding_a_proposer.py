"""CONTRIBUTING.md "Adding a proposer", followed literally: a throwaway method package with its proposer
and its family, one import and one entry in `FAMILIES`, then a small `spotbench run` that names it.

The package and the edited registry live in a copy of `proposers/` under tmp_path, put first on the
path of the run (and of its Ray workers, which inherit it); the checkout is not touched."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.provenance import files_sha256
from harness.runs.run_dir import RunDir
from proposers.registry import PROPOSERS

ROOT = Path(__file__).resolve().parents[2]

PROPOSER = '''"""The confidence order, branching or not as its folder's settings.json says."""

import json
from pathlib import Path

from proposers.baselines.confidence import ConfidenceProposer


def settings_proposer(folder: Path) -> ConfidenceProposer:
    return ConfidenceProposer(branch=json.loads((folder / "settings.json").read_text())["branch"])
'''

FAMILY = '''"""The `throwaway:DIR` family: a folder with settings.json."""

import json
from pathlib import Path

from harness.errors import UserError
from proposers.family import ProposerFamily, folder_files
from proposers.throwaway.chain import settings_proposer


def folder_of(argument):
    if argument is None or not (Path(argument) / "settings.json").is_file():
        raise UserError(f"no settings.json in {argument}; give throwaway:DIR")
    return Path(argument).resolve()


FAMILY = ProposerFamily(
    "throwaway",
    "learned",
    lambda argument, target, plain: settings_proposer(folder_of(argument)),
    lambda argument: json.loads((folder_of(argument) / "settings.json").read_text())["target"],
    files=lambda argument: folder_files(folder_of(argument)),
)
'''


def add_the_throwaway_method(overlay: Path) -> None:
    """Steps 1 to 3: the proposer module, its family, and the family in `FAMILIES`."""
    shutil.copytree(ROOT / "proposers", overlay / "proposers", ignore=shutil.ignore_patterns("__pycache__"))
    package = overlay / "proposers" / "throwaway"
    package.mkdir()
    (package / "__init__.py").write_text('"""A throwaway method."""\n')
    (package / "chain.py").write_text(PROPOSER)
    (package / "family.py").write_text(FAMILY)
    registry = overlay / "proposers" / "registry.py"
    text = registry.read_text()
    last_import, families = "from proposers.spot_sets.family import FAMILY as SPOT_SETS\n", "*PSI)"
    assert text.count(last_import) == 1 and text.count(families) == 1  # the places step 3 names
    text = text.replace(last_import, last_import + "from proposers.throwaway.family import FAMILY as THROWAWAY\n")
    registry.write_text(text.replace(families, "*PSI, THROWAWAY)"))


@pytest.mark.slow  # a run on a local Ray worker, in a subprocess
def test_a_family_added_as_contributing_says_runs_is_hashed_and_exact(tmp_path) -> None:
    assert "throwaway" not in PROPOSERS  # the checkout's registry does not know it
    overlay = tmp_path / "src"
    add_the_throwaway_method(overlay)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "settings.json").write_text(json.dumps({"branch": True, "target": "tiny-random:sdar"}))
    spec, out = f"throwaway:{checkpoint}", tmp_path / "run"
    env = os.environ | {"PYTHONPATH": f"{overlay}{os.pathsep}{ROOT}", "SPOTBENCH_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-c", "import sys; from spotbench.cli import main; sys.exit(main())", "run"]
    flags = ["--models", "tiny-random:sdar", "--limit", "2", "--gen-length", "16", "--block-length", "8"]
    flags += ["--proposers", f"confidence,{spec}", "--budgets", "4", "--temperatures", "0,1", "--workers", "1"]
    done = subprocess.run(
        [*command, *flags, "--no-progress", "--output", str(out)], cwd=overlay, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]

    run = RunDir(out)
    inputs = run.manifest()["inputs"]["checkpoints"]
    assert inputs[spec] == files_sha256([checkpoint / "settings.json"])
    rows = run.read_rows().to_pylist()
    mine = [row for row in rows if row["proposer"] == spec]
    assert len(mine) == 4 and len(rows) == 8  # 2 prompts x 2 temperatures, each arm
    assert all(row["exact"] is True and row["proposer_kind"] == "learned" for row in mine)
    assert {row["trained_on"] for row in mine} == {"tiny-random:sdar"}  # what its `check` read


def test_the_step_3_edit_applies_to_the_registry_as_it_is(tmp_path) -> None:
    """Fast: the registry still has the places step 3 names, and the edited copy imports cleanly."""
    add_the_throwaway_method(tmp_path)
    check = "from proposers.registry import PROPOSERS; print(PROPOSERS['throwaway'].kind)"
    env = os.environ | {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "learned", done.stderr[-2000:]

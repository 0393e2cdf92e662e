"""The wheel a user installs: what `python -m build` packs (setup.py, pyproject.toml) holds every file
an installed spotbench reads (the task configs and metric scripts, every suite, every model and
checkpoint a suite names) and no training state, within 60 MB installed. `.ci/run` installs it and
runs the default job from an empty directory; this test says which file went missing."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ZOO, SUITES = "harness/data/zoo", "harness/data/suites"
INSTALLED_LIMIT = 60_000_000  # bytes, unpacked


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("dist")
    # the sdist first, then the wheel from it in a temporary folder (as .ci/run): no build/ in the checkout
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)]
    subprocess.run(build, check=True, capture_output=True, cwd=ROOT)
    [path] = out.glob("spotbench-*.whl")
    return zipfile.ZipFile(path)


def folders(names: list[str]) -> set[str]:
    return {str(Path(name).parent) for name in names}


def suite_needs(suite: dict) -> set[str]:
    """The zoo folders a suite reads: its zoo models and the checkpoint folders its proposers name."""
    zoo_models = {p.name for p in (ROOT / "zoo" / "models").iterdir()}
    needed = {f"{ZOO}/models/{m}/model" for m in suite.get("models", []) if m in zoo_models}
    for spec in suite.get("proposers", []):
        where = str(spec).partition(":")[2].partition(":")[0]
        for kind in ("proposers", "drafters"):
            if where and (ROOT / "zoo" / kind / where).is_dir():
                needed.add(f"{ZOO}/{kind}/{where}")
    return needed


@pytest.mark.slow
def test_the_wheel_carries_what_an_installed_spotbench_reads(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    shipped = folders(names)
    task_configs = {f"tasks/lm_eval/{p.name}" for p in (ROOT / "tasks" / "lm_eval").glob("*.yaml")}
    assert task_configs and task_configs <= set(names)
    assert any(n.startswith("tasks/metrics/") and n.endswith(".py") for n in names)
    suites = sorted((ROOT / "suites").rglob("*.yaml"))
    assert {f"{SUITES}/{p.relative_to(ROOT / 'suites').as_posix()}" for p in suites} <= set(names)
    for path in suites:
        missing = suite_needs(yaml.safe_load(path.read_text())) - shipped
        assert not missing, f"{path.name} reads {sorted(missing)}, which the wheel does not carry"
    assert f"{ZOO}/tokenizer/tokenizer.json" in names
    assert not [n for n in names if "train_state" in n]
    assert sum(info.file_size for info in wheel.infolist()) <= INSTALLED_LIMIT


def test_suite_needs_names_the_folders_a_suite_reads() -> None:
    """The checker's negative control: a suite naming a zoo model and checkpoints needs their folders."""
    suite = {"models": ["sdar-a", "some/hub-id"], "proposers": ["confidence", "spot:spot-sdar-a", "spot-sets"]}
    assert suite_needs(suite) == {f"{ZOO}/models/sdar-a/model", f"{ZOO}/proposers/spot-sdar-a"}

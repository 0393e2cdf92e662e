"""Imports point downward (DESIGN.md section 4): spotbench -> cluster -> harness, proposers, tasks;
proposers -> harness; tasks -> harness.errors only. Each package is imported whole (every module) in a
fresh interpreter, which then reports which of the project's packages, and whether Ray, got loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("spotbench", "cluster", "harness", "proposers", "tasks")
PROBE = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(module.name)
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {project} or name == "ray")))
"""

ALLOWED = {
    "harness": {"harness"},
    "tasks": {"tasks", "harness"},
    "proposers": {"proposers", "harness"},
    "cluster": {"cluster", "harness", "proposers", "tasks", "ray"},
    "spotbench": {"spotbench", "cluster", "harness", "proposers", "tasks", "ray"},
}


def loaded_by(package: str) -> list[str]:
    probe = PROBE.replace("{project}", repr(set(PROJECT)))
    out = subprocess.run([sys.executable, "-c", probe, package], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return json.loads(out)


@pytest.mark.slow  # a fresh interpreter per package
@pytest.mark.parametrize("package", list(ALLOWED))
def test_a_package_loads_only_the_packages_below_it(package: str) -> None:
    modules = loaded_by(package)
    assert any(m.startswith(package + ".") for m in modules)  # the probe did import the package
    assert {m.split(".")[0] for m in modules} <= ALLOWED[package], modules
    if package == "tasks":  # tasks share only the error type with the library core
        assert {m for m in modules if m.startswith("harness")} <= {"harness", "harness.errors"}


@pytest.mark.slow
def test_the_probe_catches_an_upward_import(tmp_path) -> None:
    """Negative control: a harness module that imports cluster is reported."""
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("")
    (tmp_path / "harness" / "upward.py").write_text("import cluster.suite\n")
    probe = PROBE.replace("{project}", repr(set(PROJECT)))
    env_path = f"{tmp_path}:{ROOT}"
    out = subprocess.run([sys.executable, "-c", probe, "harness"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, check=True, env={"PYTHONPATH": env_path, "PATH": ""}).stdout
    assert "cluster" in {m.split(".")[0] for m in json.loads(out)}

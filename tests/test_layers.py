"""Imports point downward (DESIGN.md section 4): spotbench -> cluster -> harness, proposers, tasks;
proposers -> harness; tasks -> harness.errors only. Each package is imported whole (every module) in a
fresh interpreter, which then reports which of the project's packages, and whether Ray, got loaded.

And no two project modules import each other, directly or around a circle: the import graph is read
statically from the sources, so an import inside a function or under `TYPE_CHECKING` counts (a lazy
import hides a circle, it does not remove it). Inside the library, the run store (`harness.runs`) has
floors of its own (`RUN_STORE_FLOORS`) and reads nothing of the library above it."""

from __future__ import annotations

import ast
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
    out = subprocess.run(
        [sys.executable, "-c", probe, package], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    ).stdout
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
    out = subprocess.run(
        [sys.executable, "-c", probe, "harness"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={"PYTHONPATH": env_path, "PATH": ""},
    ).stdout
    assert "cluster" in {m.split(".")[0] for m in json.loads(out)}


def project_modules(root: Path, packages: tuple[str, ...] = PROJECT) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the packages under `root`."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]
) -> set[str]:
    """The project modules one import statement of `module` imports: `from a import b` imports a.b
    if that is a module, else a; a name resolves to its longest prefix that is a module (importing a
    function imports its module); relative imports are resolved against `module`. The parent
    packages an import also runs are not counted."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            parts = parts[: len(parts) - node.level + is_package]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph(root: Path, packages: tuple[str, ...] = PROJECT) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its source (top level, functions,
    `TYPE_CHECKING` blocks)."""
    modules = project_modules(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name] |= imported_modules(node, name, path.name == "__init__.py", modules)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(component)
    return cycles


def test_no_import_cycle_between_project_modules() -> None:
    cycles = [sorted(cycle) for cycle in import_cycles(import_graph(ROOT))]
    assert not cycles, f"modules that import each other (move what both need into a module below them): {cycles}"


def test_the_cycle_finder_reports_a_two_module_cycle_even_through_a_lazy_import(tmp_path) -> None:
    """Negative control: a.py imports b at the top, b.py imports a inside a function; c.py imports both
    and is in no cycle."""
    package = tmp_path / "harness"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from harness import b\n")
    (package / "b.py").write_text("def late():\n    from . import a\n    return a\n")
    (package / "c.py").write_text("import harness.a\nfrom harness.b import late\n")
    graph = import_graph(tmp_path, ("harness",))
    assert graph["harness.c"] == {"harness.a", "harness.b"}
    assert import_cycles(graph) == [{"harness.a", "harness.b"}]


RUN_STORE_FLOORS = (
    ("harness.runs.schema", "harness.runs.configs", "harness.runs.files", "harness.runs.damage"),
    ("harness.runs.index", "harness.runs.summary"),
    ("harness.runs.verify",),
    ("harness.runs.run_dir",),
    ("harness.runs.lm_eval",),
)
"""The run store's modules, bottom floor first: a module imports only modules of the floors below its own."""
RUN_STORE_READS = {"harness.errors", "harness.bootstrap", "harness.versions"}
"""What the run store imports of the library outside it (the pipeline, report and gate sit above it)."""


def upward_imports(
    graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...], package: str, reads: set[str]
) -> list[str]:
    """`importer -> imported` for each import of a module of `package` that is not of a lower floor
    (nor, outside `package`, one of `reads`), and each module of `package` no floor lists."""
    floor = {module: level for level, members in enumerate(floors) for module in members}
    members = [m for m in graph if m.startswith(package + ".")]
    found = [f"{m} is on no floor" for m in members if m not in floor]
    for module in members:
        for imported in sorted(graph[module]):
            inside = imported.startswith(package + ".")
            if (inside and floor.get(imported, len(floors)) >= floor.get(module, -1)) or (
                not inside and imported not in reads and imported.split(".")[0] == package.split(".")[0]
            ):
                found.append(f"{module} -> {imported}")
    return found


def test_the_run_store_imports_only_downward() -> None:
    package_init = "harness.runs"
    graph = {m: deps - {package_init} for m, deps in import_graph(ROOT, ("harness",)).items() if m != package_init}
    assert not upward_imports(graph, RUN_STORE_FLOORS, package_init, RUN_STORE_READS)


def test_the_floor_check_reports_an_upward_a_sideways_and_an_outside_import() -> None:
    """Negative control on a made-up graph: verify reading run_dir (up), files reading damage (same
    floor), summary reading the pipeline (outside the store, not allowed) and a module on no floor."""
    graph = {
        "harness.runs.files": {"harness.runs.damage"},
        "harness.runs.damage": set(),
        "harness.runs.verify": {"harness.runs.run_dir", "harness.runs.files", "harness.errors"},
        "harness.runs.run_dir": {"harness.runs.verify"},
        "harness.runs.summary": {"harness.pipeline", "harness.bootstrap"},
        "harness.runs.stray": set(),
    }
    floors = (
        ("harness.runs.files", "harness.runs.damage", "harness.runs.summary"),
        ("harness.runs.verify",),
        ("harness.runs.run_dir",),
    )
    assert sorted(upward_imports(graph, floors, "harness.runs", {"harness.errors", "harness.bootstrap"})) == [
        "harness.runs.files -> harness.runs.damage",
        "harness.runs.stray is on no floor",
        "harness.runs.summary -> harness.pipeline",
        "harness.runs.verify -> harness.runs.run_dir",
    ]

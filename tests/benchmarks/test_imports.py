"""Benchmarks use the library, never a command module: what a command and a benchmark share lives in
the library, public (a command's private helper would be a second, hidden API)."""

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def command_imports(source: str) -> list[str]:
    """The `spotbench.commands...` modules a source imports, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [name for name in names if name.startswith("spotbench.commands")]
    return found


def test_no_benchmark_imports_a_command_module() -> None:
    offenders = {path.name: command_imports(path.read_text()) for path in sorted(BENCHMARKS.glob("*.py"))}
    assert not {name: modules for name, modules in offenders.items() if modules}


def test_the_check_sees_a_lazy_import_of_a_commands_private_helper() -> None:
    """Negative control: an import inside a function, as the benchmarks did it."""
    source = "def main():\n    from spotbench.commands.convert import _Limits\n    import spotbench.commands.run\n"
    assert command_imports(source) == ["spotbench.commands.convert", "spotbench.commands.run"]

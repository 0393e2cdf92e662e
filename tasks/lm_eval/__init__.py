"""lm-evaluation-harness task configs that ship with spotbench (package data, so they are installed
with it): `gsm8k_local`, lm-eval's gsm8k read from spotbench's own GSM8K data. `spotbench lm-eval`
includes this folder when it is given no `--include_path`, from any working directory; from Python,
pass `TaskManager(include_path=TASKS_DIR)` to lm-eval."""

from __future__ import annotations

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent


def with_tasks(argv: list[str]) -> list[str]:
    """lm-eval's arguments, with this folder as `--include_path` unless they name one."""
    if any(arg == "--include_path" or arg.startswith("--include_path=") for arg in argv):
        return argv
    return [*argv, "--include_path", str(TASKS_DIR)]

"""Tasks by name. Adding a benchmark = one module with a class following `tasks.base.Task`, plus
one line here (modules are imported only when their task is asked for)."""

from __future__ import annotations

import importlib

from harness.errors import UserError
from tasks.base import Task

TASKS = {
    "arith": "tasks.arith:Arith",
    "gsm8k": "tasks.gsm8k:GSM8K",
    "math500": "tasks.math500:MATH500",
    "mbpp": "tasks.mbpp:MBPP",
    "humaneval": "tasks.humaneval:HumanEval",
}
DEFAULT_TASK = "arith"


def task_names() -> list[str]:
    return list(TASKS)


def get_task(name: str) -> Task:
    """A fresh task object (default options) for `name`."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    module, _, cls = TASKS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()

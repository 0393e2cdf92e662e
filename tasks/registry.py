"""Tasks by name. Adding a benchmark = one module with a class following `tasks.base.Task`, plus
one line here (modules are imported only when their task is asked for)."""

from __future__ import annotations

import dataclasses
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


def get_task(name: str, num_fewshot: int | None = None) -> Task:
    """A fresh task object for `name`; `num_fewshot` sets the examples in the prompt of tasks that
    take any (zero-shot tasks ignore it), None keeps the task's default."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    module, _, cls = TASKS[name].partition(":")
    task = getattr(importlib.import_module(module), cls)()
    if num_fewshot is not None and hasattr(task, "num_fewshot"):
        task = dataclasses.replace(task, num_fewshot=num_fewshot)
    return task

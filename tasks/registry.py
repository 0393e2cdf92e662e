"""Tasks by name. Adding a benchmark = one module with a class following `tasks.base.Task`, plus
one line here (modules are imported only when their task is asked for)."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from harness.errors import UserError
from tasks.base import Task, prompt_ids
from tasks.prompt_ids import PREFIX, PromptIds

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
    if name.startswith(PREFIX):
        return PromptIds(name.removeprefix(PREFIX))
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}, or ids:FILE.jsonl (token-id prompts)")
    module, _, cls = TASKS[name].partition(":")
    task = getattr(importlib.import_module(module), cls)()
    if num_fewshot is not None and hasattr(task, "num_fewshot"):
        task = dataclasses.replace(task, num_fewshot=num_fewshot)
    return task


def check_scorers(names: list[str] | tuple[str, ...]) -> None:
    """Before a run scores anything: if a task scores by running code, the sandbox must prove that it
    scores (`tasks.sandbox.check_jail`), else a UserError naming what the jail said."""
    if any(getattr(get_task(n), "sandboxed", False) for n in names if not n.startswith(PREFIX)):
        from tasks.sandbox import check_jail

        check_jail()


def train_prompts(limits: dict[str, int], tokenizer: Any) -> list[tuple[str, list[int]]]:
    """(`task/train/i`, zero-shot prompt ids) for the first `limit` train-split samples of each task:
    what learned proposers are trained on. Only train splits: nothing from a test split trains anything."""
    prompts = []
    for name, limit in limits.items():
        task = get_task(name, num_fewshot=0)
        prompts += [
            (f"{name}/train/{i}", prompt_ids(task, sample, tokenizer))
            for i, sample in enumerate(task.load("train", limit=limit))
        ]
    return prompts


def train_answers(task_names: list[str], tokenizer: Any, limit: int | None = None) -> list[tuple[list[int], list[int]]]:
    """(zero-shot prompt ids, reference answer ids) of the first `limit` train-split samples of each task
    (None: all), in the tasks' order, prompts built for the tokenizer (its chat template, if any): what
    a Psi-Spec drafter and a conversion train on. Only train splits: nothing from a test split trains
    anything."""
    pairs = []
    for name in task_names:
        task = get_task(name, num_fewshot=0)
        pairs += [
            (prompt_ids(task, sample, tokenizer), tokenizer.encode(sample.target, add_special_tokens=False))
            for sample in task.load("train", limit=limit)
        ]
    return pairs


def train_pairs(task_names: list[str]) -> list[tuple[str, str]]:
    """(zero-shot prompt, reference completion) of every train-split sample: the training text of
    the tiny zoo targets (short contexts, so no few-shot), in the format they are evaluated with."""
    pairs = []
    for name in task_names:
        task = get_task(name.strip(), num_fewshot=0)
        pairs += [(task.prompt(s), s.target) for s in task.load("train")]
    return pairs

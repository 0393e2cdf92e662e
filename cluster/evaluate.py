"""What a worker does with one prompt: the arm pipeline for each of its pending groups.

Plain Python (no Ray), so it runs the same in a Ray actor, in `spotbench diagnose` and in a test. An
`Evaluator` loads each target and task once and keeps them; `evaluate` hands a unit's groups to
`harness.pipeline.evaluate_group`, with the proposer registry and the task's scorer.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from cluster.suite import Suite
from harness.pipeline import Group, Score, evaluate_group
from harness.results import Row
from tasks.base import Sample, prompt_ids


@dataclass(frozen=True)
class Unit:
    """One prompt of one (model, task) with the groups still to do (the others are on disk)."""

    model: str
    task: str
    sample: Sample
    groups: tuple[tuple[float, str, int], ...]
    arms: tuple[tuple[str, int], ...] | None = None
    """The (proposer, budget) arms still to do; None: every arm of the suite (a run extended with new
    arms decodes only those for the groups it already has)."""


class Evaluator:
    def __init__(self, suite: Suite):
        from proposers import arms

        self.suite = suite
        self.arms = arms(suite.proposers, suite.budgets)
        self._targets: dict[str, Any] = {}
        self._tasks: dict[str, Any] = {}
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def target(self, name: str) -> Any:
        if name not in self._targets:
            from harness.targets.registry import load_target

            target = load_target(name, device=self.suite.device, dtype=self.suite.dtype)
            self._targets[name] = target.exact() if self.suite.exact else target
        return self._targets[name]

    def task(self, name: str) -> Any:
        if name not in self._tasks:
            from tasks.registry import get_task

            self._tasks[name] = get_task(name, self.suite.num_fewshot)
        return self._tasks[name]

    def evaluate(self, unit: Unit) -> list[list[Row]]:
        """The rows of each pending group of the unit, one list per group."""
        from harness.lossless import near_tie_tolerance
        from proposers import build_proposer

        target, task = self.target(unit.model), self.task(unit.task)
        ids = tuple(prompt_ids(task, unit.sample, target.tokenizer))
        text = task.prompt(unit.sample, target.tokenizer)
        arms = [a for a in self.arms if unit.arms is None or (a.proposer, a.budget) in unit.arms]

        def score(completion: str) -> Score:
            result = task.score([unit.sample], [completion])[0]
            return Score(bool(result["correct"]), result)

        out = []
        for temperature, rule, seed in unit.groups:
            group = Group(unit.model, unit.task, unit.sample.sample_id, ids, temperature, rule, seed,
                          self.suite.gen_length, self.suite.block_length, text, unit.sample.reference)
            out.append(evaluate_group(target, group, arms, build_proposer, score, self.suite.exact,
                                      near_tie_tolerance(target.dtype), self.worker))
        return out

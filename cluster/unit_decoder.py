"""What a worker does with a few prompts: the arm pipeline for each of their pending groups, the
prompts of a group decoded together (`batch_size` at a time).

Plain Python (no Ray), so it runs the same in a Ray actor, in `spotbench diagnose` and in a test. A
`UnitDecoder` loads each target and task once and keeps them; `decode` hands a unit's groups to
`harness.pipeline.decode_groups` (`harness.passes_only.replay_groups` in a passes-only
run), with the proposer registry and the task's scorer. An `auto` budget is chosen here, once per
worker, on the worker's own hardware.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
from dataclasses import dataclass
from typing import Any, cast

from cluster.provenance import measure_load
from cluster.suite import Suite
from harness.passes_only import replay_groups
from harness.pipeline import AUTO, Arm, Group, Score, decode_groups
from harness.runs.schema import Row
from tasks.base import Sample, prompt_ids
from tasks.chat import Chat
from tasks.prompt_ids import check_in_vocabulary

CALIBRATION_PROMPTS = 4
"""Train-split prompts an `auto` budget is chosen on, per worker: enough to rank budgets whose
predicted times differ by more than a few percent, cheap next to a run's prompts (replay costs no
target pass)."""
CALIBRATION_SEED = 0


@dataclass(frozen=True)
class Unit:
    """Prompts of one (model, task) with the groups still to do (the others are on disk), decoded
    `batch_size` at a time."""

    model: str
    task: str
    samples: tuple[Sample, ...]
    groups: tuple[tuple[float, str, int], ...]
    arms: tuple[tuple[str, int], ...] | None = None
    """The (proposer, budget) arms still to do; None: every arm of the suite (a run extended with new
    arms decodes only those for the groups it already has)."""
    batch_size: int | None = None
    """None: the suite's first batch size."""

    def describe(self) -> str:
        ids = ", ".join(s.sample_id for s in self.samples[:3]) + (", ..." if len(self.samples) > 3 else "")
        return f"{self.model}/{self.task}/{ids}"


class UnitDecoder:
    def __init__(self, suite: Suite):
        from proposers import arms

        self.suite = suite
        self.arms = arms(suite.proposers, suite.budgets)
        self._targets: dict[str, Any] = {}
        self._tasks: dict[str, Any] = {}
        self._chosen: dict[tuple, Arm] = {}
        self._costs: dict[tuple, Any] = {}
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.loads: list[dict[str, Any]] = []
        """Per model loaded: load time and peak memory (`cluster.provenance.measure_load`), for the manifest."""

    def target(self, name: str) -> Any:
        if name not in self._targets:
            from harness.targets.registry import load_target

            def load() -> Any:
                target = load_target(
                    name,
                    device=self.suite.device,
                    dtype=self.suite.dtype,
                    mask_id=self.suite.mask_id,
                    eos_id=self.suite.eos_id,
                )
                return target.exact() if self.suite.exact else target

            self._targets[name], cost = measure_load(load, name)
            self.loads.append(cost | {"worker": self.worker})
        return self._targets[name]

    def chat(self, model: str) -> Chat:
        """How prompts reach `model`: its chat template unless the suite turns it off."""
        chat = Chat(self.target(model).tokenizer, self.suite.chat_template, self.suite.system_prompt)
        chat.check(model)
        return chat

    def task(self, name: str) -> Any:
        if name not in self._tasks:
            from tasks.registry import get_task

            self._tasks[name] = get_task(name, self.suite.num_fewshot)
        return self._tasks[name]

    def decode(self, unit: Unit) -> list[list[Row]]:
        """The rows of each pending group of the unit, one list per (group, prompt), groups outer: the
        unit's prompts of each group are decoded together, `batch_size` at a time."""
        from harness.decoding.tree import unbatched_notice
        from harness.lossless import near_tie_tolerance
        from harness.targets.registry import block_length_trained
        from proposers import build_proposer

        target, task = self.target(unit.model), self.task(unit.task)
        chat = self.chat(unit.model)
        ids = [tuple(check_in_vocabulary(prompt_ids(task, s, chat), target.vocab_size)) for s in unit.samples]
        texts = [task.prompt(s, chat) for s in unit.samples]
        arms = [a for a in self.arms if unit.arms is None or (a.proposer, a.budget) in unit.arms]
        batch_size = unit.batch_size or self.suite.batch_sizes[0]

        def scorer(sample: Sample) -> Any:
            def score(completion: str) -> Score:
                result = task.score([sample], [completion])[0]
                return Score(bool(result["correct"]), result)

            return score if getattr(task, "scored", True) else None  # token-id prompts have no reference

        decode = (
            functools.partial(replay_groups, replay_checks=self.suite.replay_check)
            if self.suite.passes_only
            else decode_groups
        )

        def build(spec: str, target: Any, plain: Any) -> Any:
            """`build_proposer`, noting in the model's load record (the manifest's `loads`) a proposer
            that drafts one generation at a time in a batch: slower, never silently."""
            proposer = build_proposer(spec, target, plain)
            notice = unbatched_notice(proposer) if batch_size > 1 else None
            if notice:
                notices = next(r for r in self.loads if r["model"] == unit.model).setdefault("notices", [])
                if notice not in notices:
                    notices.append(notice)
            return proposer

        block_length = self.suite.block_length_for(unit.model)  # read from the target's files: once a unit
        trained = block_length_trained(unit.model, block_length)
        out = []
        for temperature, rule, seed in unit.groups:
            groups = [
                Group(
                    unit.model,
                    unit.task,
                    sample.sample_id,
                    prompt,
                    temperature,
                    rule,
                    seed,
                    self.suite.gen_length,
                    block_length,
                    text,
                    sample.reference,
                    chat.label,
                    trained,
                )
                for sample, prompt, text in zip(unit.samples, ids, texts)
            ]
            chosen = [self.chosen(arm, unit, temperature, rule) if arm.budget == AUTO else arm for arm in arms]
            out += decode(
                target,
                groups,
                chosen,
                build,
                [scorer(s) for s in unit.samples],
                self.suite.exact,
                near_tie_tolerance(target.dtype),
                self.worker,
                self.suite.ar_sampling,
                batch_size,
                self.suite.reference_checks,
            )
        return out

    def chosen(self, arm: Arm, unit: Unit, temperature: float, rule: str) -> Arm:
        """An `auto` arm with the budget this worker chose (once per model, task, temperature, rule
        and proposer): its own pass cost curve and the proposer's replayed passes on calibration
        prompts of the task's train split (`harness.budget`)."""
        key = (unit.model, unit.task, temperature, rule, arm.proposer)
        if key not in self._chosen:
            from harness.budget import choose_budget, measure_pass_cost, predict
            from harness.decoding import DecodeConfig, Proposer, parse_rule, plain_decode
            from proposers import build_proposer

            target, task = self.target(unit.model), self.task(unit.task)
            config = DecodeConfig(
                parse_rule(rule, target.family, target.mask_id),
                self.suite.gen_length,
                self.suite.block_length_for(unit.model),
                temperature,
                CALIBRATION_SEED,
            )
            prompts = [
                prompt_ids(task, s, self.chat(unit.model)) for s in task.load("train", limit=CALIBRATION_PROMPTS)
            ]
            cost_key = (unit.model, self.suite.gen_length, self.suite.block_length_for(unit.model))
            if cost_key not in self._costs:
                self._costs[cost_key] = measure_pass_cost(target, prompts[0], config)
            plains = [(plain_decode(target, ids, config, keep_logits=True), config) for ids in prompts]
            # `auto` budgets are chosen for diffusion targets only, whose proposers are `Proposer`s
            best = choose_budget(
                predict(
                    plains,
                    lambda plain: cast(Proposer, build_proposer(arm.proposer, target, plain)),
                    self._costs[cost_key],
                )
            )
            self._chosen[key] = dataclasses.replace(arm, chosen=best.budget, predicted_speedup_wall=best.speedup_wall)
        return self._chosen[key]

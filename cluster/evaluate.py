"""What a worker does with one prompt: the plain reference and every speculative arm, side by side.

Plain Python (no Ray), so it runs the same in a Ray actor and in a test. An `Evaluator` loads each
target once and keeps it; for a prompt it decodes the plain reference once per (temperature, rule,
seed) group and reuses it for every (proposer, budget) arm, all on the same process, so the wall-time
speedup compares like with like. Each arm is checked against the reference and scored.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from cluster.suite import Suite
from tasks.base import Sample, prompt_ids


@dataclass(frozen=True)
class Unit:
    """One prompt of one (model, task) with the groups still to do (the others are on disk)."""

    model: str
    task: str
    sample: Sample
    groups: tuple[tuple[float, str, int], ...]


class Evaluator:
    def __init__(self, suite: Suite):
        self.suite = suite
        self._targets: dict[str, Any] = {}
        self._tasks: dict[str, Any] = {}
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def target(self, name: str) -> Any:
        if name not in self._targets:
            from harness.targets.registry import load_target

            target = load_target(name)
            self._targets[name] = target.exact() if self.suite.exact else target
        return self._targets[name]

    def task(self, name: str) -> Any:
        if name not in self._tasks:
            from tasks.registry import get_task

            self._tasks[name] = get_task(name, self.suite.num_fewshot)
        return self._tasks[name]

    def evaluate(self, unit: Unit) -> list[list[dict[str, Any]]]:
        """The rows of each pending group of the unit, one list per group."""
        from harness.decoding import DecodeConfig, parse_rule, plain_decode, speculative_decode
        from harness.lossless import check_lossless, near_tie_tolerance
        from proposers import build_proposer

        target, task = self.target(unit.model), self.task(unit.task)
        tokenizer = target.tokenizer
        ids = prompt_ids(task, unit.sample, tokenizer)
        tolerance = near_tie_tolerance(target.dtype)
        out = []
        for temperature, rule_text, seed in unit.groups:
            rule = parse_rule(rule_text, target.family, target.mask_id)
            config = DecodeConfig(rule, self.suite.gen_length, self.suite.block_length, temperature, seed)
            plain = plain_decode(target, ids, config)
            completion = tokenizer.decode(plain.answer_ids)
            score = task.score([unit.sample], [completion])[0]
            base = {
                "model": unit.model, "task": unit.task, "sample_id": unit.sample.sample_id,
                "temperature": temperature, "rule": rule_text, "seed": seed,
                "gen_length": self.suite.gen_length, "block_length": self.suite.block_length,
                "exact_mode": self.suite.exact, **_metrics("plain", plain), "completion": completion,
                "stale_hit_rate": plain.metrics.stale_hit_rate, "correct": bool(score["correct"]),
                "score": json.dumps(score, default=str), "worker": self.worker,
            }
            rows = []
            for proposer, budget in self.suite.arms():
                spec = speculative_decode(target, ids, build_proposer(proposer, target, plain), config, budget)
                report = check_lossless(plain, spec, tolerance)
                divergence = report.divergence
                spec_completion = tokenizer.decode(spec.answer_ids)
                spec_correct = (bool(score["correct"]) if spec_completion == completion
                                else bool(task.score([unit.sample], [spec_completion])[0]["correct"]))
                rows.append(base | _metrics("spec", spec) | {
                    "proposer": proposer, "budget": budget,
                    "draft_nodes": spec.metrics.draft_nodes,
                    "mean_accept_len": spec.metrics.mean_accept_len,
                    "accepted_per_depth": list(spec.metrics.accepted_per_depth),
                    "speedup_nfe": plain.metrics.nfe / spec.metrics.nfe,
                    "speedup_wall": plain.metrics.wall_s / spec.metrics.wall_s,
                    "exact": report.exact, "verdict": report.verdict,
                    "divergence_token": divergence and divergence.token,
                    "divergence_step": divergence and divergence.step,
                    "divergence_confidence_margin": divergence and divergence.confidence_margin,
                    "divergence_decision_gap": divergence and divergence.decision_gap,
                    "near_tie_tolerance": tolerance,
                    "spec_completion": spec_completion, "spec_correct": spec_correct,
                })
            out.append(rows)
        return out


def _metrics(prefix: str, generation: Any) -> dict[str, Any]:
    m = generation.metrics
    return {f"{prefix}_nfe": m.nfe, f"{prefix}_rows": m.rows, f"{prefix}_commits": m.commits,
            f"{prefix}_tokens": len(generation.answer_ids), f"{prefix}_wall_s": m.wall_s,
            f"{prefix}_target_s": m.target_s, f"{prefix}_proposer_s": m.proposer_s,
            f"{prefix}_other_s": m.other_s}

"""The arm pipeline checks its batched plain references against their decodes alone: a defect of the
padded path corrupts reference and arm alike, so their comparison alone would call it exact."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from harness.lossless import near_tie_tolerance
from harness.pipeline import Arm, Group, decode_groups, references_to_check
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer

PROMPTS = ["Q: 12+30=?\nA:", "Q: 9-4=?\nA:", "Q: Ana buys 3 apples at $4 each. How much?\nA:", "7*6="]
ARMS = [Arm("confidence", 2), Arm("oracle", 3, "oracle")]
FLOAT32 = ["llada-a", "sdar-a"]
"""Trained zoo targets: their decisions have real gaps, so a corrupted float32 reference is told
apart from a near-tie (a random target's logits are nearly flat, every decision a near-tie)."""
EXACT = ["tiny-random:llada", "tiny-random:sdar"]
"""In exactness mode any difference is a logic error: random targets do."""


def groups(target: DLMTarget) -> list[Group]:
    ids = [
        target.tokenizer.encode(p, add_special_tokens=False) if target.tokenizer else list(p.encode()) for p in PROMPTS
    ]
    return [Group(target.name, "prompt", str(i), tuple(p), 0.0, "top1", 3, 16, 8) for i, p in enumerate(ids)]


class RotatedRows(DLMTarget):
    """Defect: a batched pass hands every generation the logits of the next one."""

    def forward_many(self, passes):
        outputs = super().forward_many(passes)
        currents = [o.current for o in outputs]
        if len({c.shape for c in currents}) > 1:
            return outputs
        return [dataclasses.replace(o, current=c) for o, c in zip(outputs, currents[1:] + currents[:1])]


class LeakyPadding(DLMTarget):
    """Defect: a generation's logits take in some of the generation before it in the batch, as a padding
    mask that lets a row see another row's keys would."""

    def forward_many(self, passes):
        outputs = super().forward_many(passes)
        out = [outputs[0]]
        for before, this in itertools.pairwise(outputs):
            leak = before.current if before.current.shape == this.current.shape else 0.0
            out.append(dataclasses.replace(this, current=this.current + 3.0 * leak))
        return out


def variant(kind: type[DLMTarget], name: str) -> DLMTarget:
    t = load_dlm_target(name)
    t = t.exact() if name in EXACT else t
    return kind(t.model, t.family, t.mask_id, t.eos_id, t.tokenizer, name, rowwise=t.rowwise)


def rows_of(target: DLMTarget, checks: int):
    exact = target.name in EXACT
    tolerance = near_tie_tolerance(target.dtype)
    out = decode_groups(
        target,
        groups(target),
        ARMS,
        build_proposer,
        [None] * 4,
        exact,
        tolerance,
        batch_size=4,
        reference_checks=checks,
    )
    return [row for group_rows in out for row in group_rows]


def test_the_shortest_and_longest_prompts_are_checked_first() -> None:
    g = groups(load_dlm_target("tiny-random:llada"))
    assert references_to_check(g, 4, 1) == [3]  # the shortest: the most padding
    assert references_to_check(g, 4, 3) == [3, 2, 1]  # then the longest, then inwards
    assert references_to_check(g, 4, 9) == [3, 2, 1, 0]
    assert references_to_check(g, 1, 4) == [] and references_to_check(g[:1], 8, 4) == []


@pytest.mark.parametrize("name", [*FLOAT32, *EXACT, "tiny-random:converted"])
def test_an_honest_batch_passes_its_reference_check(name: str) -> None:
    rows = rows_of(variant(DLMTarget, name), checks=1)
    assert {r.sample_id for r in rows if r.reference_check is not None} == {"3"}
    assert all(r.reference_check in (None, "exact", "near-tie") and r.verdict != "logic-error" for r in rows)


@pytest.mark.parametrize("defect", [RotatedRows, LeakyPadding])
def test_without_the_check_a_corrupted_batch_reads_exact(defect: type[DLMTarget]) -> None:
    """What the check is for: arms compared with an equally corrupted reference say `exact`."""
    unchecked = rows_of(variant(defect, "llada-a"), checks=0)
    honest = rows_of(variant(DLMTarget, "llada-a"), checks=0)
    wrong = [r for r, h in zip(unchecked, honest) if r.plain_answer_ids != h.plain_answer_ids]
    assert any(r.exact for r in wrong) and all(r.reference_check is None for r in unchecked)


@pytest.mark.parametrize("defect", [RotatedRows, LeakyPadding])
@pytest.mark.parametrize("name", [*FLOAT32, *EXACT])
def test_a_defect_of_the_batched_path_is_caught(defect: type[DLMTarget], name: str) -> None:
    """Negative controls: the checked group's rows are logic errors, so the run is not exact."""
    rows = rows_of(variant(defect, name), checks=1)  # the default
    caught = [r for r in rows if r.reference_check == "logic-error"]
    assert caught and all(r.verdict == "logic-error" and r.exact is False for r in caught)

"""A passes-only run's pass counts are a full run's, row for row, in exactness mode; its sample decoded
for real catches a replay that counts wrong; its replayed rows carry no wall time and plain's score."""

from __future__ import annotations

import dataclasses
import functools

import pytest

import harness.passes_only as passes_only
from harness.lossless import near_tie_tolerance
from harness.passes_only import REPLAYED, replay_groups
from harness.pipeline import Arm, Group, Score, decode_groups
from harness.runs.schema import ROW_SCHEMA
from harness.runs.summary import summarize
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer

PROMPTS = ["Q: 12+30=?\nA:", "Q: 9-4=?\nA:", "Q: Ana buys 3 apples at $4 each. How much?\nA:", "7*6=", "Q: 1+1=?\nA:"]
ARMS = [
    Arm("confidence", 2),
    Arm("confidence-branch", 4),
    Arm("oracle-order", 3, "ceiling"),
    Arm("oracle", 3, "oracle"),
]
TARGETS = {"tiny-random:sdar": (16, 8), "tiny-random:llada": (16, 8), "sdar-a": (64, 32)}
"""(gen length, block length) of each target: sdar-a decodes at the block length it was trained at."""


@functools.cache
def exact_target(name: str) -> DLMTarget:
    return load_dlm_target(name).exact()


def groups(name: str, temperature: float, rule: str) -> list[Group]:
    target = exact_target(name)
    gen, block = TARGETS[name]
    ids = [
        target.tokenizer.encode(p, add_special_tokens=False) if target.tokenizer else list(p.encode()) for p in PROMPTS
    ]
    return [Group(target.name, "prompt", str(i), tuple(p), temperature, rule, 5, gen, block) for i, p in enumerate(ids)]


def length_score(completion: str) -> Score:
    """A scorer that depends on the completion, so a replayed row's score is seen to be plain's."""
    return Score(len(completion) % 2 == 0, {"length": len(completion)})


def both(name: str, temperature: float, rule: str, checks: int = 2, batch_size: int = 2):
    target, g = exact_target(name), groups(name, temperature, rule)
    tolerance = near_tie_tolerance(target.dtype)
    scores = [length_score] * len(g)
    full = decode_groups(target, g, ARMS, build_proposer, scores, True, tolerance, batch_size=batch_size)
    replayed = replay_groups(
        target, g, ARMS, build_proposer, scores, True, tolerance, batch_size=batch_size, replay_checks=checks
    )
    return [r for rows in full for r in rows], [r for rows in replayed for r in rows]


COUNTS = ("spec_nfe", "spec_target_forwards", "spec_rows", "spec_commits", "plain_nfe", "plain_target_forwards")


@pytest.mark.parametrize(
    "name",
    ["tiny-random:sdar", "tiny-random:llada", pytest.param("sdar-a", marks=pytest.mark.slow)],  # a trained target
)
@pytest.mark.parametrize("temperature, rule", [(0.0, "top1"), (1.0, "top1"), (1.0, "threshold:0.3")])
def test_passes_only_counts_equal_a_full_runs_row_for_row(name, temperature, rule) -> None:
    full, replayed = both(name, temperature, rule)
    assert len(full) == len(replayed) == len(PROMPTS) * len(ARMS)
    for f, r in zip(full, replayed):
        assert (f.sample_id, f.proposer, f.budget) == (r.sample_id, r.proposer, r.budget)
        assert [getattr(f, c) for c in COUNTS] == [getattr(r, c) for c in COUNTS], (f.sample_id, f.proposer)
        assert (f.accepted_per_depth, f.spec_answer_ids, f.correct) == (
            r.accepted_per_depth,
            r.spec_answer_ids,
            r.correct,
        )
        assert r.replay_nfe == f.spec_target_forwards and r.replay_s is not None
    decoded = [r for r in replayed if not r.replayed]
    assert len(decoded) == 2 * len(ARMS)  # the sample: shortest and longest prompt
    assert {r.sample_id for r in decoded} == {"2", "3"}
    assert all(r.exact and r.verdict == "exact" and r.spec_wall_s > 0 for r in decoded)
    assert any(f.speedup_nfe > 1 for f in full)  # the arms save passes: equal counts are not trivially 1


def test_replayed_rows_carry_no_wall_time_no_exactness_and_plains_score() -> None:
    _, rows = both("tiny-random:sdar", 0.0, "top1", checks=1)
    replayed = [r for r in rows if r.replayed]
    assert replayed and all(
        r.spec_wall_s == r.plain_wall_s == r.spec_target_s == 0.0 and r.speedup_wall is None for r in replayed
    )
    assert all(r.exact is None and r.verdict == REPLAYED for r in replayed)
    assert all(r.spec_correct == r.correct and r.spec_completion == r.completion for r in replayed)
    import pyarrow as pa

    summary = summarize(pa.Table.from_pylist([dataclasses.asdict(r) for r in rows], schema=ROW_SCHEMA)).to_pylist()
    for arm in summary:
        timed = [r for r in rows if not r.replayed and r.proposer == arm["proposer"]]
        assert arm["replayed_rows"] == len(PROMPTS) - 1 and arm["replay_checked"] == len(timed) == 1
        assert arm["replay_mismatches"] == 0 and arm["exact_rate"] == 1.0 and arm["distribution_n"] == 0
        assert arm["speedup_wall"] == pytest.approx(timed[0].plain_wall_s / timed[0].spec_wall_s)
        assert arm["spec_tokens_per_s"] == pytest.approx(timed[0].spec_tokens / timed[0].spec_wall_s)
        assert arm["replay_cost"] == pytest.approx(timed[0].replay_s / timed[0].spec_wall_s)
        assert arm["speedup_nfe"] == pytest.approx(
            sum(r.plain_target_forwards for r in rows if r.proposer == arm["proposer"])
            / sum(r.spec_target_forwards for r in rows if r.proposer == arm["proposer"])
        )


def test_a_replay_that_counts_wrong_is_caught_by_the_sample(monkeypatch) -> None:
    """Negative control: a replay one pass short on every arm makes each decoded row of the sample a
    logic error in exactness mode (exact_rate and the gate fail), and is counted in float32 mode."""
    real_replay = passes_only.replay

    def one_short(*args, **kwargs):
        generation = real_replay(*args, **kwargs)
        generation.metrics.nfe -= 1
        return generation

    monkeypatch.setattr(passes_only, "replay", one_short)
    _, rows = both("tiny-random:sdar", 0.0, "top1")
    decoded = [r for r in rows if not r.replayed]
    assert decoded and all(r.verdict == "logic-error" and r.exact is False for r in decoded)
    assert all(r.replay_nfe == r.spec_target_forwards - 1 for r in decoded)
    g = groups("tiny-random:sdar", 0.0, "top1")
    float_rows = replay_groups(
        load_dlm_target("tiny-random:sdar"), g, ARMS, build_proposer, [None] * len(g), False, 1e-4, replay_checks=1
    )
    decoded = [r for rows in float_rows for r in rows if not r.replayed]
    assert decoded and all(r.verdict != "logic-error" and r.replay_nfe != r.spec_target_forwards for r in decoded)

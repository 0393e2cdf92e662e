"""Budget by measured latency: the cost curve interpolates, and the choice follows the hardware's
cost of a row (synthetic curves here, so the test does not depend on this machine's speed), and a
calibration prompt another process slowed does not choose it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import cast

import pytest

from harness.budget import CostCurve, choose_budget, measure_pass_cost, predict, robust_rate
from harness.decoding import DecodeConfig, Generation, parse_rule, plain_decode
from harness.decoding.tree import Proposer
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer

PROMPTS = [list(b"Q: 2+2=?\nA:"), list(b"Q: 7*6=?\nA:")]


def test_the_cost_curve_interpolates_and_extrapolates_linearly() -> None:
    curve = CostCurve((1, 3, 5), (1.0, 2.0, 4.0))
    assert [curve.at(r) for r in (1, 2, 3, 4, 5, 7)] == [1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert curve.at(0) == 0.5 and CostCurve((1,), (2.0,)).at(9) == 2.0


def test_a_measured_curve_has_one_positive_time_per_row_count() -> None:
    target = load_dlm_target("tiny-random:sdar")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8)
    curve = measure_pass_cost(target, PROMPTS[0], config, rows=(1, 4), repeats=2)
    assert curve.rows == (1, 4) and all(s > 0 for s in curve.seconds)


@pytest.fixture(scope="module")
def plains():
    target = load_dlm_target("tiny-random:llada")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, 1.0, 2)
    return target, [(plain_decode(target, p, config, keep_logits=True), config) for p in PROMPTS]


def oracle(target: DLMTarget) -> Callable[[Generation], Proposer]:
    return lambda plain: cast(Proposer, build_proposer("oracle", target, plain))


def test_where_rows_are_free_the_budget_that_saves_most_passes_wins(plains) -> None:
    target, generations = plains
    flat = CostCurve((1, 17), (100.0, 100.0))  # a GPU-like pass: rows cost nothing extra (and the
    # measured milliseconds of proposer and engine time vanish beside the synthetic seconds)
    predictions = predict(generations, oracle(target), flat)
    best = choose_budget(predictions)
    assert best.speedup_nfe == max(p.speedup_nfe for p in predictions) > 2
    assert best.speedup_wall == pytest.approx(best.speedup_nfe, rel=0.01)


def test_where_rows_cost_more_than_they_save_the_smallest_budget_wins(plains) -> None:
    target, generations = plains
    steep = CostCurve((1, 17), (100.0, 4000.0))  # a row costs more than a whole pass saves
    predictions = predict(generations, oracle(target), steep)
    assert choose_budget(predictions).budget == 1 and choose_budget(predictions).speedup_wall < 1
    assert [p.budget for p in predictions] == list(range(1, 17))


def test_a_rate_leaves_out_the_prompts_a_disturbance_slowed() -> None:
    samples = [(0.08, 16), (0.09, 18), (0.075, 15), (0.8, 16)]  # 5 ms per unit; the last at 50 ms
    assert robust_rate(samples) == pytest.approx(0.005)
    # the control: the plain ratio of sums, which the one slowed prompt moves 3.2x
    assert sum(s for s, _ in samples) / sum(u for _, u in samples) > 3 * robust_rate(samples)
    assert robust_rate(samples[:3]) == pytest.approx(0.005) and robust_rate([]) == 0.0


def test_one_calibration_prompt_slowed_tenfold_leaves_the_prediction_within_5_percent(plains) -> None:
    """The engine time of one of four calibration prompts taken 10x (another process shared the
    machine while it was decoded): each budget's predicted time moves by under 5%."""
    target, generations = plains

    def engine(generation, per_commit):  # a plain generation whose engine took `per_commit` per commit
        m = generation.metrics
        wall = m.target_s + m.proposer_s + per_commit * m.commits
        return dataclasses.replace(generation, metrics=dataclasses.replace(m, wall_s=wall))

    clean = [(engine(g, 0.005), c) for g, c in generations * 2]
    slowed = clean[:3] + [(engine(clean[3][0], 0.05), clean[3][1])]
    curve = CostCurve((1, 17), (0.01, 0.03))  # comparable to the engine's 5 ms per commit

    def oracle(plain):
        return build_proposer("oracle", target, plain)

    # the control: as a ratio of sums the engine would cost 3.25x as much per commit, which would
    # move every prediction by more than a third
    commits = sum(g.metrics.commits for g, _ in slowed)
    naive = sum(g.metrics.other_s for g, _ in slowed) / commits
    robust = robust_rate([(g.metrics.other_s, g.metrics.commits) for g, _ in slowed])
    assert naive > 3 * robust and robust == pytest.approx(0.005)
    for before, after in zip(predict(clean, oracle, curve, (1, 4, 8)), predict(slowed, oracle, curve, (1, 4, 8))):
        assert after.seconds == pytest.approx(before.seconds, rel=0.05)
        assert commits * (naive - robust) > before.seconds / 3

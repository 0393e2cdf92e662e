"""The summary's comparisons between arms of one cell: a learned arm against the best training-free
baseline (paired bootstrap interval), every arm against the oracle, and where a proposer was trained;
its wall figures' intervals, disturbed rows and robust wall speedup."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
import torch

from cluster.unit_decoder import UnitDecoder, Unit
from cluster.suite import Suite
from harness.runs.schema import ROW_SCHEMA
from harness.runs.summary import percentiles, summarize, wall_disturbed
from proposers.spot.network import SpotConfig, SpotNet, save_spot
from tasks.registry import get_task


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("spot")
    torch.manual_seed(0)
    save_spot(SpotNet(SpotConfig(width=16, layers=1, heads=2, ffn=32)), folder, {"provenance": {"target": "a"}})
    suite = Suite(
        models=("tiny-random:sdar", "tiny-random:llada"),
        proposers=("oracle", "confidence", "confidence-branch", f"spot:{folder}"),
        limit=3,
        temperatures=(0.0, 1.0),
        budgets=(2, 5),
        gen_length=16,
        block_length=8,
    )
    unit_decoder = UnitDecoder(suite)
    rows = [
        dataclasses.asdict(row)
        for model in suite.models
        for sample in get_task("arith").load("test", limit=3)
        for group in unit_decoder.decode(Unit(model, "arith", (sample,), tuple(suite.groups())))
        for row in group
    ]
    return summarize(pa.Table.from_pylist(rows, schema=ROW_SCHEMA)).to_pylist()


def test_every_arm_is_summarised_and_lossless(summary) -> None:
    assert len(summary) == 2 * 2 * 2 * 4  # models x temperatures x budgets x proposers
    assert all(r["exact_rate"] == 1.0 and r["speedup_nfe"] >= 1.0 and r["n"] == 3 for r in summary)
    assert all(r["speedup_nfe_ci95"][0] <= r["speedup_nfe"] <= r["speedup_nfe_ci95"][1] for r in summary)
    learned = [r for r in summary if r["proposer"].startswith("spot:")]
    assert {r["trained_on"] for r in learned} == {"a"} and {r["proposer_kind"] for r in learned} == {"learned"}
    assert {r["trained_on"] for r in summary if r not in learned} == {None}


def test_learned_arms_are_compared_with_the_best_baseline_and_every_arm_with_the_oracle(summary) -> None:
    oracle = [r for r in summary if r["proposer"] == "oracle"]
    assert all(r["oracle_fraction"] == 1.0 for r in oracle) and any(r["speedup_nfe"] > 1.5 for r in oracle)
    for learned in (r for r in summary if r["proposer_kind"] == "learned"):
        cell = {
            r["proposer"]: r["speedup_nfe"]
            for r in summary
            if all(r[k] == learned[k] for k in ("model", "temperature", "budget"))
        }
        best = max(("confidence", "confidence-branch"), key=cell.__getitem__)
        assert learned["best_baseline"] == best
        assert learned["vs_best_baseline"] == pytest.approx(cell[learned["proposer"]] / cell[best])
        low, high = learned["vs_best_baseline_ci95"]
        assert low <= high
        assert learned["oracle_fraction"] == pytest.approx(cell[learned["proposer"]] / cell["oracle"])
    assert all(r["vs_best_baseline"] is None for r in summary if r["proposer_kind"] != "learned")


def test_every_arm_has_its_wall_split_and_per_prompt_latency(summary) -> None:
    for r in summary:
        assert 0 < r["target_share"] < 1 and 0 <= r["proposer_share"] < 1
        assert r["target_share"] + r["proposer_share"] < 1  # the engine is never free
        assert 0 < r["plain_engine_share"] < 1
        for latency in (r["plain_latency_s"], r["spec_latency_s"]):
            assert len(latency) == 3 and 0 < latency[0] <= latency[1] <= latency[2]


def test_latency_percentiles_interpolate_between_prompts() -> None:
    assert percentiles([4.0, 1.0, 100.0, 2.0, 3.0]) == pytest.approx([3.0, 61.6, 96.16])
    assert percentiles([0.5]) == [0.5, 0.5, 0.5]


# Wall figures: intervals over prompts, disturbed rows and the robust speedup. The rows are one real
# row's copies with set walls (the issue's run: 8 prompts at batch 1, plain ~3 s and speculative ~2.3 s
# each, and one speculative row at 25.98 s while another process shared the machine).
SPEEDUPS = (1.22, 1.35, 1.28, 1.31, 1.25, 1.38, 1.30, 1.27)


@pytest.fixture(scope="module")
def template() -> dict:
    suite = Suite(models=("tiny-random:sdar",), proposers=("confidence",), limit=1, temperatures=(0.0,), budgets=(2,))
    sample = get_task("arith").load("test", limit=1)[0]
    [[row]] = UnitDecoder(suite).decode(Unit(suite.models[0], "arith", (sample,), tuple(suite.groups())))
    return dataclasses.asdict(row)


def arm_rows(
    template: dict, proposer: str = "confidence", slow: dict[int, dict] | None = None, long: bool = True
) -> list[dict]:
    """Eight prompts of 32 plain and 16 speculative passes; with `long`, prompt 2 is four times as
    long (every pass of both sides costs 4x), which is no disturbance. `slow`: prompt -> its walls'
    factors."""
    rows = []
    for i, speedup in enumerate(SPEEDUPS):
        plain = 3.0 * (4 if long and i == 2 else 1) * (1 + (i - 3.5) / 40)
        factors = (slow or {}).get(i, {})
        rows.append(
            template
            | {
                "proposer": proposer,
                "sample_id": f"p{i}",
                "plain_target_forwards": 32,
                "spec_target_forwards": 16,
                "plain_wall_s": plain * factors.get("plain", 1),
                "spec_wall_s": plain / speedup * factors.get("spec", 1),
            }
        )
    return rows


def summarise(rows: list[dict]) -> dict[str, dict]:
    return {r["proposer"]: r for r in summarize(pa.Table.from_pylist(rows, schema=ROW_SCHEMA)).to_pylist()}


def test_one_row_slowed_tenfold_is_flagged_and_moves_the_robust_wall_speedup_by_under_5_percent(template) -> None:
    clean = summarise(arm_rows(template))["confidence"]
    assert clean["disturbed_rows"] == 0 and clean["speedup_wall_robust"] == clean["speedup_wall"]
    rows = arm_rows(template, slow={5: {"spec": 10}})  # 2.17 s -> 21.7 s
    assert wall_disturbed(rows) == [i == 5 for i in range(8)]
    slowed = summarise(rows)["confidence"]
    assert slowed["disturbed_rows"] == 1
    assert abs(slowed["speedup_wall_robust"] / clean["speedup_wall_robust"] - 1) < 0.05  # 1.290x -> 1.281x
    # the control: the raw ratio of sums, which the same row does move (1.29x -> 0.72x), so the
    # test above can fail; and its interval says how unsure it is
    assert slowed["speedup_wall"] / clean["speedup_wall"] < 0.6
    for figures in (clean, slowed):
        low, high = figures["speedup_wall_ci95"]
        assert low <= figures["speedup_wall"] <= high
    assert slowed["speedup_wall_ci95"][1] - slowed["speedup_wall_ci95"][0] > 5 * (
        clean["speedup_wall_ci95"][1] - clean["speedup_wall_ci95"][0]
    )


def test_the_issues_run_reads_its_per_prompt_speedup_without_the_disturbed_row(template) -> None:
    rows = arm_rows(template, long=False)
    rows[3]["spec_wall_s"] = 25.98  # 2.29 s undisturbed
    figures = summarise(rows)["confidence"]
    assert figures["speedup_wall"] == pytest.approx(0.57, abs=0.01) and figures["disturbed_rows"] == 1
    assert figures["speedup_wall_robust"] == pytest.approx(1.29, abs=0.01)
    assert figures["speedup_wall_ci95"][0] < 0.57 and figures["speedup_wall_ci95"][1] > 1


def test_a_disturbed_plain_reference_is_flagged_in_every_arm_of_its_group(template) -> None:
    rows = arm_rows(template, "confidence", {4: {"plain": 10}}) + arm_rows(template, "oracle", {4: {"plain": 10}})
    flags = wall_disturbed(rows)
    assert [r["sample_id"] for r, off in zip(rows, flags) if off] == ["p4", "p4"]
    summary = summarise(rows)
    clean = summarise(arm_rows(template))["confidence"]
    for arm in ("confidence", "oracle"):
        assert summary[arm]["disturbed_rows"] == 1
        assert summary[arm]["speedup_wall"] > 1.5 * clean["speedup_wall"]  # the raw figure jumps
        assert summary[arm]["speedup_wall_robust"] == pytest.approx(clean["speedup_wall_robust"], rel=0.05)


def test_disturbances_within_the_factor_and_a_uniform_slowdown_are_not_flagged(template) -> None:
    # 2.5x on one side is within the factor of 3; a row slowed on both sides keeps its speedup
    rows = arm_rows(template, slow={1: {"spec": 2.5}, 6: {"plain": 10, "spec": 10}})
    assert not any(wall_disturbed(rows))
    assert wall_disturbed(arm_rows(template, slow={1: {"spec": 3.5}})) == [i == 1 for i in range(8)]


def test_throughput_and_latency_have_intervals_over_prompts(template) -> None:
    figures = summarise(arm_rows(template))["confidence"]
    for name in ("plain_tokens_per_s", "spec_tokens_per_s"):
        low, high = figures[f"{name}_ci95"]
        assert low <= figures[name] <= high and low < high
    for side in ("plain", "spec"):
        low, high = figures[f"{side}_latency_p50_ci95"]
        p50 = figures[f"{side}_latency_s"][0]
        assert low <= p50 <= high and low < high
        walls = sorted(r[f"{side}_wall_s"] for r in arm_rows(template))
        assert walls[0] <= low and high <= walls[-1]

"""The summary's comparisons between arms of one cell: a learned arm against the best training-free
baseline (paired bootstrap interval), every arm against the oracle, and where a proposer was trained."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
import torch

from cluster.evaluate import Evaluator, Unit
from cluster.suite import Suite
from harness.results import ROW_SCHEMA
from harness.summary import percentiles, summarize
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
    evaluator = Evaluator(suite)
    rows = [
        dataclasses.asdict(row)
        for model in suite.models
        for sample in get_task("arith").load("test", limit=3)
        for group in evaluator.evaluate(Unit(model, "arith", (sample,), suite.groups()))
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

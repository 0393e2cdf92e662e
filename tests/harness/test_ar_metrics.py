"""AR metrics from row to gate: a proposer's draft forwards on the target's network count in
target_forwards (tokens per target forward, speedup_nfe), a draft model's do not; per-depth
acceptance; rejection-mode rows at T>0 carry the verdict `distribution` (not token-checked), which the
summary, the gate and the report keep apart from exact rows."""

from __future__ import annotations

import dataclasses
import functools

import pyarrow as pa
import pytest

from cluster.suite import Suite
from cluster.unit_decoder import Unit, UnitDecoder
from harness.decoding.autoregressive import ARDraftRequest, DraftForwards
from harness.gate import gate
from harness.pipeline import Arm, Group, decode_group
from harness.reports.html import render_report
from harness.runs.run_dir import RunDir
from harness.runs.schema import ROW_SCHEMA, Row
from harness.runs.summary import summarize
from harness.targets.registry import load_target
from proposers.baselines.prompt_lookup import PromptLookupProposer
from tasks.registry import get_task

SUITE = Suite(
    models=("tiny-random-ar",),
    proposers=("draft-model:tiny-random-ar", "draft-model:tiny-random-ar:1"),
    limit=2,
    temperatures=(0.0, 1.0),
    budgets=(3,),
    gen_length=16,
    block_length=16,
    ar_sampling="rejection",
)


class CountingLookup(PromptLookupProposer):
    """Prompt lookup that claims two forwards of the target's network per pass (as a weight-sharing drafter would)."""

    def __init__(self) -> None:
        super().__init__()
        self.forwards = DraftForwards()

    def propose(self, request: ARDraftRequest):
        self.forwards.target += 2
        return super().propose(request)


def test_draft_forwards_on_the_target_count_as_target_forwards() -> None:
    ids = tuple(b"the cat sat on the mat; the cat sat on the")
    group = Group("tiny-random-ar", "prompt", "0", ids, 0.0, "greedy", 0, 24, 8)
    [lookup, counted] = decode_group(
        load_target("tiny-random-ar").exact(),
        group,
        [Arm("prompt-lookup", 4), Arm("counting", 4)],
        lambda spec, target, plain: PromptLookupProposer() if spec == "prompt-lookup" else CountingLookup(),
        None,
        True,
        1e-9,
    )
    assert lookup.spec_target_forwards == lookup.spec_nfe and lookup.speedup_nfe == 24 / lookup.spec_nfe
    assert counted.spec_nfe == lookup.spec_nfe and counted.spec_target_forwards == 3 * counted.spec_nfe
    assert counted.speedup_nfe == pytest.approx(24 / (3 * counted.spec_nfe))
    assert counted.exact and counted.mean_accept_len == lookup.mean_accept_len


@functools.cache
def rejection_rows() -> tuple[dict, ...]:
    unit_decoder = UnitDecoder(SUITE)
    return tuple(
        dataclasses.asdict(row)
        for sample in get_task("arith").load("test", limit=2)
        for group in unit_decoder.decode(
            Unit("tiny-random-ar", "arith", (sample,), tuple(SUITE.groups("tiny-random-ar")))
        )
        for row in group
    )


def test_rejection_rows_are_checked_at_t0_and_reported_in_distribution_above() -> None:
    rows = rejection_rows()
    assert len(rows) == 8 and {r["ar_sampling"] for r in rows} == {"rejection"}
    for row in rows:
        if row["temperature"] == 0:
            assert row["exact"] is True and row["verdict"] == "exact"
        else:
            assert row["exact"] is None and row["verdict"] == "distribution" and row["divergence_step"] is None
        assert row["spec_draft_model_forwards"] > 0 and row["spec_target_forwards"] == row["spec_nfe"]
    itself = [r for r in rows if r["proposer"] == "draft-model:tiny-random-ar" and r["temperature"] == 0]
    assert all(r["accepted_per_depth"] == [r["spec_nfe"]] * 3 for r in itself)  # the target drafting for itself


def test_summary_gate_and_report_keep_distribution_rows_apart(tmp_path) -> None:
    rows = rejection_rows()
    summary = {
        (r["proposer"], r["temperature"]): r
        for r in summarize(pa.Table.from_pylist(list(rows), schema=ROW_SCHEMA)).to_pylist()
    }
    assert summary["draft-model:tiny-random-ar:1", 1.0]["exact_rate"] is None
    assert summary["draft-model:tiny-random-ar:1", 1.0]["distribution_n"] == 2
    assert summary["draft-model:tiny-random-ar:1", 0.0]["exact_rate"] == 1.0
    for arm in summary.values():
        members = [r for r in rows if (r["proposer"], r["temperature"]) == (arm["proposer"], arm["temperature"])]
        nfe = sum(r["spec_nfe"] for r in members)
        commits = sum(r["spec_commits"] for r in members)
        assert arm["tokens_per_target_forward"] == arm["mean_accept_len"] == commits / nfe
        assert arm["accept_rate_per_depth"] == [
            sum(r["accepted_per_depth"][d] for r in members) / nfe for d in range(3)
        ]
        assert arm["ar_sampling"] == "rejection"
    checks = gate(list(summary.values()), list(summary.values()), "complete")
    assert all(c.ok for c in checks)
    assert [c.allowed for c in checks if c.metric == "exact_rate" and c.value is None] == [
        "not token-checked (distribution)"
    ] * 2
    broken = [r | {"exact": False, "verdict": "logic-error"} if r["temperature"] == 0 else r for r in rows]
    worse = summarize(pa.Table.from_pylist(broken, schema=ROW_SCHEMA)).to_pylist()
    assert not all(c.ok for c in gate(worse, worse, "complete"))  # a checked row that diverges still fails

    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    for start in range(0, len(rows), 2):  # a group's two arms per file
        run.write_group([Row(**r) for r in rows[start : start + 2]])
    run.write_summary()
    page = render_report(run)
    assert "tokens per target forward" in page and "<th>distribution</th>" in page and "rejection" in page

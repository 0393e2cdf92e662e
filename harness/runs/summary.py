"""The summary of a run: one row per arm (model, proposer, task, temperature, rule, budget), over
samples and seeds, plus the comparisons a study reads off it.

Speedups, acceptance and throughput are ratios of sums (a long generation weighs more than a short
one, as in throughput), not means of per-sample ratios. Arms of one *cell* (model, task, temperature,
rule, budget) decode the same prompts, so the comparisons between them resample prompts jointly
(`harness.bootstrap`; a prompt's seeds stay together, they share its text):

- `best_baseline` / `vs_best_baseline` (learned arms): the arm's speedup_nfe over the best
  training-free baseline's at the same budget, with its interval, the best taken again in every draw;
- `oracle_fraction`: the arm's speedup_nfe over the oracle's (the true trajectory replayed), when the
  cell has an oracle arm: how much of what the budget allows the proposer reaches.

Together with `trained_on` these make a cross-model transfer study a view of a run
(`spotbench run --models A,B,C --proposers confidence,confidence-branch,oracle,spot:DIR --transfer`).

Rows replayed by a passes-only run (`Row.replayed`) count in the pass figures and accuracy (their
completion is the plain reference's) and in no wall figure: those read the really decoded rows only,
and `replay_checked`, `replay_mismatches` and `replay_cost` say how the replay fared against them.

Wall figures (speedup_wall, tokens/s, p50 latency) carry 95% intervals over the same prompt draws.
A ratio of wall sums follows one generation another process slowed, so the rows whose pass cost is
far off their arm's are flagged (`wall_disturbed`), counted (`disturbed_rows`) and left out of
`speedup_wall_robust`, the figure the gate compares. It is speedup_wall's own ratio of sums over the
other rows, not a median of per-prompt ratios: equal to speedup_wall on an undisturbed run, so the
two never disagree without a flagged row to say why.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from harness.bootstrap import disturbed, interval, resampled_quantile, resampled_speedups, versus_best
from harness.runs.schema import arrow_schema

SUMMARY_KEY = ("model", "proposer", "task", "temperature", "rule", "budget", "batch_size")
CELL_KEY = ("model", "task", "temperature", "rule", "budget", "batch_size")


@dataclass(frozen=True)
class SummaryRow:
    model: str
    proposer: str
    task: str
    temperature: float
    rule: str
    budget: int
    batch_size: int
    """Prompts decoded together, plain and speculative alike: `speedup_wall` compares them at the same size."""
    proposer_kind: str
    trained_on: str | None
    chosen_budgets: list[int]
    """The budgets decoded with: `budget` itself, or for `auto` (budget -1) each worker's choice."""
    predicted_speedup_wall: float | None
    """`auto` arms: the speedup_wall their workers predicted (mean), beside the measured one."""
    ar_sampling: str
    n: int
    exact_rate: float | None
    """Of the token-checked rows, the share equal to plain decoding; None when none was checked."""
    distribution_n: int
    """Rows reported, not token-checked (verdict `distribution`: AR rejection sampling at T>0)."""
    lossless_rate: float
    reference_checks: int
    """Rows whose batched plain reference was decoded again alone and compared (`Row.reference_check`)."""
    reference_logic_errors: int
    """... of which the batched reference was not its decode alone: those rows are logic errors."""
    replayed_rows: int
    """Rows whose passes were replayed, not decoded (a passes-only run: `harness.passes_only`): in the
    pass figures and accuracy (the plain reference's completion), in no wall figure."""
    replay_checked: int
    """Really decoded rows whose replayed pass count was compared with the decoded one."""
    replay_mismatches: int
    """... of which the two differ (a logic error in exactness mode; a float near-tie otherwise)."""
    replay_cost: float | None
    """The replays' time over the decodes they stand for (speculative wall), on the checked rows."""
    speedup_nfe: float
    """Plain over speculative target forwards (a proposer's draft forwards on the target's network counted)."""
    speedup_nfe_ci95: list[float]
    speedup_wall: float | None
    """Plain over speculative wall time, a ratio of sums over every decoded row (the throughputs' ratio)."""
    speedup_wall_ci95: list[float] | None
    """Its 95% interval over prompts (the draws of speedup_nfe_ci95)."""
    speedup_wall_robust: float | None
    """speedup_wall over the rows no disturbance moved (`wall_disturbed`); what `gate` compares.
    Equal to speedup_wall when no row is disturbed; None when every row is."""
    disturbed_rows: int
    """Rows left out of speedup_wall_robust: their time per pass, against their plain reference's,
    is off the arm's by more than `harness.bootstrap.DISTURBED_FACTOR` (`wall_disturbed`)."""
    mean_accept_len: float
    """Tokens per verify pass (AR: tokens per cycle, tau), bonus included."""
    tokens_per_target_forward: float
    """Tokens per forward of the target's network, draft and verify forwards counted."""
    accept_rate_per_depth: list[float]
    """[d]: the share of passes that accepted a draft at depth d + 1 (vLLM's per-position acceptance)."""
    accuracy: float | None
    correct: int | None
    spec_accuracy: float | None
    plain_nfe_per_token: float
    spec_nfe_per_token: float
    plain_tokens_per_s: float | None
    """Job throughput: tokens per second of worker time (rows' walls are their shares of their
    batches, so their sum is the time the workers spent), per worker."""
    spec_tokens_per_s: float | None
    plain_tokens_per_s_ci95: list[float] | None
    """95% intervals over prompts of the two throughputs (every row counted, as in the figures)."""
    spec_tokens_per_s_ci95: list[float] | None
    plain_prompts_per_s: float | None
    """... and prompts per second of worker time, per worker."""
    spec_prompts_per_s: float | None
    proposer_share: float | None
    """Of the speculative arm's wall time, the share spent in the proposer."""
    target_share: float | None
    """... in the target's passes; the rest (1 - target - proposer) is the engine: rules, noise, trees."""
    plain_engine_share: float | None
    """Of the plain reference's wall time, the share outside the target's passes (no proposer there)."""
    plain_latency_s: list[float]
    """Per-prompt wall time of the plain reference: [p50, p90, p99] over the arm's generations."""
    spec_latency_s: list[float]
    """... of the speculative arm."""
    plain_latency_p50_ci95: list[float]
    """95% interval over prompts of the p50 latency (plain; a prompt's seeds drawn together)."""
    spec_latency_p50_ci95: list[float]
    stale_hit_rate: float | None
    stop_leaf: float
    """Of the arm's passes, the share whose walk stopped at a leaf (the budget ran out on that branch)."""
    stop_position: float
    """... stopped because the target committed a position no child drafted (an order error)."""
    stop_token: float
    """... stopped because the children drafted the right position with other tokens."""
    best_baseline: str | None
    vs_best_baseline: float | None
    vs_best_baseline_ci95: list[float] | None
    oracle_fraction: float | None


SUMMARY_SCHEMA = arrow_schema(SummaryRow)


def summarize(rows: pa.Table) -> pa.Table:
    cells: dict[tuple, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows.to_pylist():
        cells[tuple(row[f] for f in CELL_KEY)][row["proposer"]].append(row)
    out = []
    for cell_key, arms in sorted(cells.items()):
        draws = _joint_draws(arms)
        speedups = {
            arm: _ratio(members, "plain_target_forwards", "spec_target_forwards") for arm, members in arms.items()
        }
        kinds = {arm: members[0]["proposer_kind"] for arm, members in arms.items()}
        baselines = [arm for arm in arms if kinds[arm] == "baseline"]
        best = max(baselines, key=speedups.__getitem__) if baselines else None
        oracle = next((arm for arm in arms if kinds[arm] == "oracle"), None)
        for arm, members in sorted(arms.items()):
            versus = kinds[arm] == "learned" and best is not None
            out.append(
                _arm_summary(dict(zip(CELL_KEY, cell_key)) | {"proposer": arm}, members)
                | {
                    "speedup_nfe_ci95": list(interval(draws[arm])),
                    "best_baseline": best if versus else None,
                    "vs_best_baseline": speedups[arm] / speedups[best] if versus and best is not None else None,
                    "vs_best_baseline_ci95": list(interval(versus_best(draws[arm], [draws[b] for b in baselines])))
                    if versus
                    else None,
                    "oracle_fraction": speedups[arm] / speedups[oracle] if oracle else None,
                }
            )
    table = pa.Table.from_pylist(out, schema=SUMMARY_SCHEMA)
    return table.sort_by([(k, "ascending") for k in SUMMARY_KEY])


def _arm_summary(key: dict[str, Any], members: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(members)
    timed = [r for r in members if not r["replayed"]]  # replayed rows carry no time: walls are the sample's
    total = {
        f: sum(r[f] for r in members)
        for f in (
            "plain_nfe",
            "spec_nfe",
            "plain_wall_s",
            "spec_wall_s",
            "spec_proposer_s",
            "spec_commits",
            "plain_target_s",
            "spec_target_s",
            "plain_target_forwards",
            "spec_target_forwards",
            "plain_tokens",
            "spec_tokens",
            "stops_leaf",
            "stops_position",
            "stops_token",
        )
    }
    stale = [r["stale_hit_rate"] for r in members if r["stale_hit_rate"] is not None]
    predicted = [r["predicted_speedup_wall"] for r in members if r["predicted_speedup_wall"] is not None]
    scored = [r for r in members if r["correct"] is not None]
    correct = sum(bool(r["correct"]) for r in scored)
    wall = total["spec_wall_s"]
    timed_tokens = {side: sum(r[f"{side}_tokens"] for r in timed) for side in ("plain", "spec")}
    replay_checked = [r for r in timed if r["replay_nfe"] is not None]
    replay_wall = sum(r["spec_wall_s"] for r in replay_checked)
    checked = [r["exact"] for r in members if r["exact"] is not None]
    depths = max(len(r["accepted_per_depth"]) for r in members)
    accepted = [
        sum(r["accepted_per_depth"][d] for r in members if d < len(r["accepted_per_depth"])) for d in range(depths)
    ]
    return key | {
        "proposer_kind": members[0]["proposer_kind"],
        "trained_on": members[0]["trained_on"],
        "n": n,
        "chosen_budgets": sorted({r["chosen_budget"] for r in members}),
        "predicted_speedup_wall": statistics.mean(predicted) if predicted else None,
        "ar_sampling": members[0]["ar_sampling"],
        "exact_rate": sum(checked) / len(checked) if checked else None,
        "distribution_n": sum(r["verdict"] == "distribution" for r in members),
        "lossless_rate": sum(r["verdict"] != "logic-error" for r in members) / n,
        "reference_checks": sum(r["reference_check"] is not None for r in members),
        "reference_logic_errors": sum(r["reference_check"] == "logic-error" for r in members),
        "replayed_rows": n - len(timed),
        "replay_checked": len(replay_checked),
        "replay_mismatches": sum(r["replay_nfe"] != r["spec_target_forwards"] for r in replay_checked),
        "replay_cost": sum(r["replay_s"] for r in replay_checked) / replay_wall if replay_wall else None,
        "speedup_nfe": total["plain_target_forwards"] / total["spec_target_forwards"],
        "speedup_wall": total["plain_wall_s"] / wall if wall else None,
        "mean_accept_len": total["spec_commits"] / total["spec_nfe"],
        "tokens_per_target_forward": total["spec_commits"] / total["spec_target_forwards"],
        "accept_rate_per_depth": [a / total["spec_nfe"] for a in accepted],
        "accuracy": correct / len(scored) if scored else None,
        "correct": correct if scored else None,
        "spec_accuracy": sum(bool(r["spec_correct"]) for r in scored) / len(scored) if scored else None,
        "plain_nfe_per_token": total["plain_nfe"] / max(1, total["plain_tokens"]),
        "spec_nfe_per_token": total["spec_nfe"] / max(1, total["spec_tokens"]),
        "plain_tokens_per_s": timed_tokens["plain"] / total["plain_wall_s"] if total["plain_wall_s"] else None,
        "spec_tokens_per_s": timed_tokens["spec"] / wall if wall else None,
        "plain_prompts_per_s": len(timed) / total["plain_wall_s"] if total["plain_wall_s"] else None,
        "spec_prompts_per_s": len(timed) / wall if wall else None,
        "proposer_share": total["spec_proposer_s"] / wall if wall else None,
        "target_share": total["spec_target_s"] / wall if wall else None,
        "plain_engine_share": 1 - total["plain_target_s"] / total["plain_wall_s"] if total["plain_wall_s"] else None,
        "plain_latency_s": percentiles([r["plain_wall_s"] for r in timed]),
        "spec_latency_s": percentiles([r["spec_wall_s"] for r in timed]),
        **_wall_certainty(timed),
        "stale_hit_rate": sum(stale) / len(stale) if stale else None,
        **{f"stop_{reason}": total[f"stops_{reason}"] / total["spec_nfe"] for reason in ("leaf", "position", "token")},
    }


def _wall_certainty(members: list[dict[str, Any]]) -> dict[str, Any]:
    """The wall figures' 95% intervals over prompts (a prompt's seeds summed, the prompt draws of
    speedup_nfe's interval) and speedup_wall over the undisturbed rows."""
    prompts = sorted({r["sample_id"] for r in members})
    position = {p: i for i, p in enumerate(prompts)}
    sums = {f: [0.0] * len(prompts) for f in ("plain_wall_s", "spec_wall_s", "plain_tokens", "spec_tokens")}
    for r in members:
        for field, per_prompt in sums.items():
            per_prompt[position[r["sample_id"]]] += r[field]

    def ratio_interval(numerator: str, denominator: str) -> list[float] | None:
        if not all(s > 0 for s in sums[denominator]):  # a prompt without time: some draws have none
            return None
        return list(interval(resampled_speedups(sums[numerator], {0: sums[denominator]})[0]))

    def p50_interval(field: str) -> list[float]:
        draws = resampled_quantile([r[field] for r in members], [position[r["sample_id"]] for r in members], 0.5)
        return list(interval(draws))

    kept = [r for r, off in zip(members, wall_disturbed(members)) if not off]
    kept_wall = sum(r["spec_wall_s"] for r in kept)
    return {
        "speedup_wall_ci95": ratio_interval("plain_wall_s", "spec_wall_s"),
        "speedup_wall_robust": sum(r["plain_wall_s"] for r in kept) / kept_wall if kept_wall else None,
        "disturbed_rows": len(members) - len(kept),
        "plain_tokens_per_s_ci95": ratio_interval("plain_tokens", "plain_wall_s"),
        "spec_tokens_per_s_ci95": ratio_interval("spec_tokens", "spec_wall_s"),
        "plain_latency_p50_ci95": p50_interval("plain_wall_s"),
        "spec_latency_p50_ci95": p50_interval("spec_wall_s"),
    }


def pass_cost(row: dict[str, Any]) -> float:
    """A row's time per target forward over its plain reference's (the same prompt on the same
    worker, so the prompt's length and the target's cost cancel): what a speculative pass costs in
    plain passes, set by the arm's tree size and proposer. NaN when either side has no time."""
    spec, plain = row["spec_wall_s"], row["plain_wall_s"]
    if not (spec > 0 and plain > 0 and row["spec_target_forwards"] > 0 and row["plain_target_forwards"] > 0):
        return math.nan
    return (spec / row["spec_target_forwards"]) / (plain / row["plain_target_forwards"])


def wall_disturbed(rows: list[dict[str, Any]]) -> list[bool]:
    """Per row: is its wall time disturbed? A row is when its `pass_cost` is more than
    `DISTURBED_FACTOR` (3) times, or less than a third of, its arm's median
    (`harness.bootstrap.disturbed`; an arm of fewer than three rows has none): another process
    slowed its speculative decoding (above) or its plain reference (below, flagging the group's row
    in every arm). Undisturbed rows of an arm agree on their pass cost within 2x; the disturbance
    that put an 8-prompt arm at 0.59x (its per-prompt median 1.30x) was 11x. It depends on the
    arm's other rows, so it is computed here, not when a row is written."""
    arms: dict[tuple, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        arms[tuple(row[k] for k in SUMMARY_KEY)].append(i)
    flags = [False] * len(rows)
    for members in arms.values():
        for i, off in zip(members, disturbed([pass_cost(rows[i]) for i in members])):
            flags[i] = off
    return flags


def _ratio(members: list[dict[str, Any]], numerator: str, denominator: str) -> float:
    return sum(r[numerator] for r in members) / sum(r[denominator] for r in members)


def _joint_draws(arms: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Bootstrap draws of every arm's speedup_nfe, resampling the cell's prompts once for all arms
    (arms of a complete run share their prompts; otherwise each arm is resampled on its own)."""
    sums: dict[str, dict[str, tuple[int, int]]] = {}
    for arm, members in arms.items():
        per_prompt = sums[arm] = {}
        for row in members:
            plain, spec = per_prompt.get(row["sample_id"], (0, 0))
            per_prompt[row["sample_id"]] = (plain + row["plain_target_forwards"], spec + row["spec_target_forwards"])
    prompt_sets = {tuple(sorted(per_prompt)) for per_prompt in sums.values()}
    if len(prompt_sets) > 1:
        return {arm: _joint_draws({arm: members})[arm] for arm, members in arms.items()}
    prompts = prompt_sets.pop()
    plain_nfe = [next(iter(sums.values()))[p][0] for p in prompts]
    return resampled_speedups(plain_nfe, {arm: [per_prompt[p][1] for p in prompts] for arm, per_prompt in sums.items()})


LATENCY_PERCENTILES = (50, 90, 99)


def percentiles(values: list[float]) -> list[float]:
    """[p50, p90, p99] of per-prompt latencies, interpolated between order statistics, so a handful
    of prompts gives numbers and one slow prompt shows in p99 only."""
    return [float(v) for v in np.percentile(values, LATENCY_PERCENTILES)]

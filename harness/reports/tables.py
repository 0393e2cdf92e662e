"""The measured tables of a run, as text cells: the HTML page and the Markdown page render the same
cells, so a figure on either is the run's figure.

Every table reads the verified run (`verified_run`): a damaged one is refused (UserError naming the
damage), so a truncated or duplicated file can neither crash a table nor count a sample twice.
Wall figures carry their 95% interval over prompts, and the rows another process slowed
(`harness.runs.summary.wall_disturbed`) are counted beside the wall speedup without them and listed.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from harness.decoding.autoregressive import AR_RULE
from harness.errors import UserError
from harness.runs.damage import damage_message
from harness.runs.run_dir import RunDir
from harness.runs.schema import AUTO, ROW_SCHEMA
from harness.runs.summary import SUMMARY_KEY, pass_cost, wall_disturbed

WALL = "speedup wall (95% over prompts; robust, disturbed rows)"


@dataclass
class VerifiedRun:
    """What the tables read: the manifest, the summary (one dict per arm) and every row, verified."""

    manifest: dict[str, Any]
    summary: list[dict[str, Any]]
    rows: list[dict[str, Any]]


@dataclass
class Table:
    title: str
    head: list[str]
    rows: list[list[str]]
    marks: list[str] = field(default_factory=list)
    """Per row: "ok", "bad" or "" (the HTML page colours them)."""
    note: str = ""
    empty: str = "no data"
    """Said instead of the table when it has no rows."""


def verified_run(run: RunDir) -> VerifiedRun:
    verification = run.verify()
    if verification.damage:
        raise UserError(damage_message(run.path, verification.damage))
    rows = verification.rows(ROW_SCHEMA).to_pylist()
    return VerifiedRun(run.manifest(), run.read_summary().to_pylist(), rows)


def run_facts(manifest: dict[str, Any], rows: int) -> list[tuple[str, str]]:
    """What made the run: its status, size, code, command, sessions, hardware and config."""
    sessions = manifest.get("sessions", [])
    deaths = sum(s.get("worker_deaths", 0) for s in sessions)
    items = [
        ("status", manifest.get("status")),
        ("rows", rows),
        ("git", manifest.get("git_revision")),
        ("created", manifest.get("created")),
        ("schema", manifest.get("schema_version")),
        ("command", " ".join(manifest.get("command") or [])),
        ("sessions", f"{len(sessions)} ({deaths} worker deaths, {len(manifest.get('config_history', []))} extensions)"),
        ("hardware", ", ".join(f"{k}={v}" for k, v in manifest.get("hardware", {}).items())),
        *manifest.get("config", {}).items(),
    ]
    return [(str(k), _text(v)) for k, v in items]


def accuracy_table(summary: list[dict]) -> Table:
    head = ["arm", "n", "accuracy (plain)", "accuracy (spec)", "mean accept len", "speedup nfe (95% over prompts)"]
    rows = [
        [
            arm(r),
            str(r["n"]),
            pct(r["accuracy"]),
            pct(r["spec_accuracy"]),
            f"{r['mean_accept_len']:.2f}",
            f"{r['speedup_nfe']:.2f}x{_interval(r.get('speedup_nfe_ci95'))}",
            wall(r),
            pct(r["stale_hit_rate"]),
        ]
        for r in summary
    ]
    return Table("Accuracy", [*head, WALL, "stale hit rate"], rows)


def exactness_table(summary: list[dict], rows: list[dict]) -> Table:
    kinds = ("exact", "near-tie", "logic-error", "distribution", "replayed")
    verdicts: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        verdicts[arm(r)][r["verdict"]] += 1
    note = (
        "distribution: rejection-sampling rows at T>0, equal to plain decoding in distribution "
        "(a statistical test), not token for token, so not token-checked."
        if any(r["distribution_n"] for r in summary)
        else ""
    )
    return Table(
        "Exactness",
        ["arm", "n", *kinds, "exact rate"],
        [[arm(r), str(r["n"]), *(str(verdicts[arm(r)][v]) for v in kinds), pct(r["exact_rate"])] for r in summary],
        marks=["ok" if r["exact_rate"] in (1, None) else "bad" for r in summary],
        note=note,
    )


def replay_table(summary: list[dict]) -> Table:
    """A passes-only run's arms (`harness.passes_only`): rows replayed, the sample's replayed pass
    counts against the decoded ones, and the replay's time over the decode it stands for."""
    rows = [
        [
            arm(r),
            str(r["n"]),
            str(r["replayed_rows"]),
            str(r["replay_checked"]),
            str(r["replay_mismatches"]),
            pct(r["replay_cost"]),
        ]
        for r in summary
        if r["replayed_rows"] or r["replay_checked"]
    ]
    return Table(
        "Passes-only: replayed passes against the really decoded sample",
        ["arm", "n", "replayed", "decoded and checked", "replayed count differs", "replay cost (x decode)"],
        rows,
        marks=["bad" if r["replay_mismatches"] else "ok" for r in summary if r["replayed_rows"] or r["replay_checked"]],
        note="Replayed rows count in speedup nfe and accuracy (their completion is the plain reference's, "
        "which lossless decoding reproduces) and in no wall figure: wall, tokens/s and latency are the "
        "decoded sample's.",
        empty="not a passes-only run",
    )


def ar_table(summary: list[dict]) -> Table:
    """Tau (tokens per verify pass), tokens per forward of the target's network (a drafter's forwards
    on it counted), the speedups and the acceptance at each draft depth."""
    head = ["arm", "sampling", "n", "tau", "tokens per target forward", "speedup nfe", WALL, "acceptance per depth"]
    rows = [
        [
            arm(r),
            str(r["ar_sampling"]),
            str(r["n"]),
            f"{r['mean_accept_len']:.2f}",
            f"{r['tokens_per_target_forward']:.2f}",
            times(r["speedup_nfe"]),
            wall(r),
            ", ".join(f"{a:.2f}" for a in r["accept_rate_per_depth"]),
        ]
        for r in summary
        if r["rule"] == AR_RULE
    ]
    return Table("Autoregressive arms: tokens per cycle and per target forward", head, rows)


def throughput_table(summary: list[dict]) -> Table:
    """Per arm (its batch size in its name): tokens/s and prompts/s of plain and speculative decoding
    per worker, the speculative wall split into target, proposer and engine (the plain reference's
    engine share beside it) and per-prompt wall (a prompt's share of its batch's time); tokens/s and
    the p50 latency with their 95% intervals over prompts."""
    head = ["arm", "tok/s plain", "tok/s spec", "prompts/s plain", "prompts/s spec", "target", "proposer", "engine"]
    head += ["plain engine", "latency plain p50 / p90 / p99 s", "latency spec p50 / p90 / p99 s"]
    rows = []
    for r in summary:
        target, proposer = r.get("target_share"), r["proposer_share"]
        engine = None if target is None or proposer is None else 1 - target - proposer
        rows.append(
            [
                arm(r),
                f"{_num(r['plain_tokens_per_s'])}{_interval(r.get('plain_tokens_per_s_ci95'), 1)}",
                f"{_num(r['spec_tokens_per_s'])}{_interval(r.get('spec_tokens_per_s_ci95'), 1)}",
                _num(r.get("plain_prompts_per_s"), 2),
                _num(r.get("spec_prompts_per_s"), 2),
                pct(target),
                pct(proposer),
                pct(engine),
                pct(r.get("plain_engine_share")),
                _latency(r, "plain"),
                _latency(r, "spec"),
            ]
        )
    return Table("Throughput: tokens/s, where the wall time goes, per-prompt latency", head, rows)


def auto_table(summary: list[dict]) -> Table:
    rows = [
        [arm(r), ", ".join(map(str, r["chosen_budgets"])), times(r["predicted_speedup_wall"]), wall(r)]
        for r in summary
        if r["budget"] == AUTO
    ]
    return Table(
        "Budget chosen by measured latency (auto): predicted against measured speedup_wall",
        ["arm", "chosen budgets", "predicted speedup wall", f"measured {WALL}"],
        rows,
    )


def disturbed_table(rows: list[dict]) -> Table:
    """Each row whose wall time `harness.runs.summary.wall_disturbed` flags: its walls and its pass cost
    (time per target forward over its plain reference's) beside its arm's median."""
    flags = wall_disturbed(rows)
    costs: defaultdict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if math.isfinite(cost := pass_cost(r)):
            costs[tuple(r[k] for k in SUMMARY_KEY)].append(cost)
    listed = [
        [
            arm(r),
            str(r["sample_id"]),
            str(r["seed"]),
            f"{r['plain_wall_s']:.3f}",
            f"{r['spec_wall_s']:.3f}",
            f"{pass_cost(r):.2f}",
            f"{statistics.median(costs[tuple(r[k] for k in SUMMARY_KEY)]):.2f}",
        ]
        for r, off in zip(rows, flags)
        if off
    ]
    return Table(
        "Disturbed rows: left out of the robust wall speedup",
        ["arm", "prompt", "seed", "plain wall s", "spec wall s", "pass cost (x plain pass)", "arm's median"],
        listed,
        marks=["bad"] * len(listed),
        empty="none: every row's pass cost is within 3x of its arm's median",
    )


def loads_table(manifest: dict[str, Any]) -> Table:
    """Each session's workers and what loading each model cost them (`cluster.provenance.measure_load`)."""
    loads = [load for session in manifest.get("sessions", []) for load in session.get("loads") or []]
    rows = [
        [
            str(r["worker"]),
            str(r["model"]),
            str(r["device"]),
            str(r["dtype"]),
            f"{r['load_s']:.2f}",
            f"{r['peak_memory_bytes'] / 2**20:.0f} MiB ({r['memory']})",
        ]
        for r in loads
    ]
    return Table(
        "Model loads per worker: time and peak memory",
        ["worker", "model", "device", "dtype", "load s", "peak memory"],
        rows,
    )


def panel(r: dict) -> str:
    return f"{r['model']}/{r['task']} T={r['temperature']:g} {r['rule']} batch {r['batch_size']}"


def arm(r: dict) -> str:
    return f"{panel(r)} {r['proposer']}@{'auto' if r['budget'] == AUTO else r['budget']}"


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def wall(r: dict) -> str:
    """speedup_wall with its interval, then the robust figure and the rows it left out."""
    robust = f"; robust {times(r['speedup_wall_robust'])}, {r['disturbed_rows']} of {r['n']} disturbed"
    return f"{times(r['speedup_wall'])}{_interval(r['speedup_wall_ci95'])}{robust}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _latency(r: dict, side: str) -> str:
    """A side's p50 / p90 / p99 latency, then its p50's 95% interval over prompts."""
    values = r.get(f"{side}_latency_s")
    if not values:
        return "-"
    return " / ".join(f"{v:.2f}" for v in values) + _interval(r.get(f"{side}_latency_p50_ci95"), label="p50 ")


def _interval(bounds: list[float] | None, digits: int = 2, label: str = "") -> str:
    return "" if bounds is None else f" ({label}{bounds[0]:.{digits}f}-{bounds[1]:.{digits}f})"


def _text(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)

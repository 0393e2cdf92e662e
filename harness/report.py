"""`report.html`: one self-contained page per run directory (inline CSS and SVG, no script, no network).

Plots are drawn as SVG by hand rather than with a plotting library so the page has no dependency,
opens offline anywhere and stays small: speedup vs budget per proposer, histograms of transitions
committed per pass, target passes per generated token, plus exactness and accuracy tables. Wall
figures carry their 95% interval over prompts, and the rows another process slowed
(`harness.runs.summary.wall_disturbed`) are counted beside the wall speedup without them and listed.
"""

from __future__ import annotations

import html
import math
import statistics
from collections import defaultdict
from typing import Any

from harness.decoding.autoregressive import AR_RULE
from harness.errors import UserError
from harness.gate import wilson_interval
from harness.runs.damage import damage_message
from harness.runs.run_dir import RunDir
from harness.runs.schema import AUTO, ROW_SCHEMA
from harness.runs.summary import SUMMARY_KEY, pass_cost, wall_disturbed

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
W, H, PAD = 360, 220, 42


def render_report(run: RunDir) -> str:
    """The page of a verified run: a damaged one is refused (UserError naming the damage), so a
    truncated or duplicated file can neither crash the drawing nor count a sample twice."""
    verification = run.verify()
    if verification.damage:
        raise UserError(damage_message(run.path, verification.damage))
    manifest = run.manifest()
    summary = run.read_summary().to_pylist()
    rows = verification.rows(ROW_SCHEMA).to_pylist()
    proposers = sorted({r["proposer"] for r in summary})
    colour = {p: COLOURS[i % len(COLOURS)] for i, p in enumerate(proposers)}
    sections = [
        _header(manifest, len(rows)),
        _section(
            "Speedup vs budget (solid: target passes, dashed: wall time without disturbed rows)",
            _speedup_charts(summary, colour),
        ),
        _section("Transitions committed per pass (largest budget)", _accept_histograms(rows, colour)),
        _section("Target passes per generated token", _nfe_per_token(summary, colour)),
        _section(
            "Budget chosen by measured latency (auto): predicted against measured speedup_wall", _auto_table(summary)
        ),
        _section("Throughput: tokens/s, where the wall time goes, per-prompt latency", _throughput_table(summary)),
        _section("Disturbed rows: left out of the robust wall speedup", _disturbed_table(rows)),
        _section("Exactness", _exactness_table(summary, rows)),
        _section("Model loads per worker: time and peak memory", _loads_table(manifest)),
        _section("Autoregressive arms: tokens per cycle and per target forward", _ar_table(summary)),
        _section("Accuracy of the plain reference (95% Wilson interval)", _accuracy_charts(summary)),
        _section("Accuracy", _accuracy_table(summary)),
    ]
    legend = " ".join(f'<span class="key" style="background:{colour[p]}"></span>{_e(p)}' for p in proposers)
    return PAGE.format(title=_e(f"spotbench run {run.path.name}"), legend=legend, body="\n".join(sections))


def write_report(run: RunDir) -> str:
    path = run.path / "report.html"
    path.write_text(render_report(run), encoding="utf-8")
    return str(path)


def _header(manifest: dict[str, Any], rows: int) -> str:
    config = manifest.get("config", {})
    sessions = manifest.get("sessions", [])
    items = [
        ("status", manifest.get("status")),
        ("rows", rows),
        ("git", manifest.get("git_revision")),
        ("created", manifest.get("created")),
        ("schema", manifest.get("schema_version")),
        ("command", " ".join(manifest.get("command") or [])),
        (
            "sessions",
            (
                f"{len(sessions)} ({sum(s.get('worker_deaths', 0) for s in sessions)} worker deaths, "
                f"{len(manifest.get('config_history', []))} extensions)"
            ),
        ),
        ("hardware", ", ".join(f"{k}={v}" for k, v in manifest.get("hardware", {}).items())),
        *config.items(),
    ]
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_text(v))}</td></tr>" for k, v in items)
    return f'<table class="meta">{cells}</table>'


def _speedup_charts(summary: list[dict], colour: dict[str, str]) -> str:
    panels: defaultdict[str, defaultdict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in summary:
        if r["budget"] != AUTO:  # an auto arm has no place on the budget axis: its own table below
            panels[_panel(r)][r["proposer"]].append(r)
    charts = []
    for title, by_proposer in sorted(panels.items()):
        series = []
        for proposer, arms in sorted(by_proposer.items()):
            arms.sort(key=lambda r: r["budget"])
            series.append((colour[proposer], "", [(r["budget"], r["speedup_nfe"]) for r in arms]))
            series.append(
                (
                    colour[proposer],
                    "5,4",
                    [(r["budget"], r["speedup_wall_robust"]) for r in arms if r["speedup_wall_robust"] is not None],
                )
            )
        charts.append(_line_chart(title, series, "budget (draft nodes per pass)", "speedup (x)"))
    return "".join(charts)


def _accept_histograms(rows: list[dict], colour: dict[str, str]) -> str:
    largest: dict[tuple, int] = {}
    for r in rows:
        key = (_panel(r), r["proposer"])
        largest[key] = max(largest.get(key, 0), r["budget"])
    counts: dict[tuple, list[int]] = {}
    for r in rows:
        key = (_panel(r), r["proposer"])
        if r["budget"] != largest[key]:
            continue
        depth = r["accepted_per_depth"] or []
        # a pass commits 1 + (deepest accepted depth) transitions; depth[d] counts passes reaching d + 1
        hist = [r["spec_nfe"] - (depth[0] if depth else 0)]
        hist += [depth[d] - (depth[d + 1] if d + 1 < len(depth) else 0) for d in range(len(depth))]
        total = counts.setdefault(key, [])
        total.extend([0] * (len(hist) - len(total)))
        for i, c in enumerate(hist):
            total[i] += c
    charts = []
    for (panel, proposer), hist in sorted(counts.items()):
        bars = [(str(i + 1), f"{i + 1} per pass", c, colour[proposer]) for i, c in enumerate(hist)]
        title = f"{panel} {proposer}@{largest[panel, proposer]}"
        charts.append(_bar_chart(title, bars, "transitions per pass", "passes"))
    return "".join(charts)


def _nfe_per_token(summary: list[dict], colour: dict[str, str]) -> str:
    groups = defaultdict(list)
    for r in summary:
        groups[(r["model"], r["task"])].append(r)
    charts = []
    for (model, task), arms in sorted(groups.items()):
        top = max(r["budget"] for r in arms)
        arms = [r for r in arms if r["budget"] == top]
        plain = sum(r["plain_nfe_per_token"] for r in arms) / len(arms)
        bars = [("plain", "plain", plain, "#7f7f7f")]
        bars += [
            (f"T={r['temperature']:g}", _arm(r), r["spec_nfe_per_token"], colour[r["proposer"]])
            for r in sorted(arms, key=lambda r: (r["proposer"], r["temperature"], r["rule"]))
        ]
        charts.append(_bar_chart(f"{model}/{task} (budget {top})", bars, "", "passes per token"))
    return "".join(charts)


def _accuracy_charts(summary: list[dict]) -> str:
    """Plain accuracy per (temperature, rule): every arm of a group shares its plain reference. Tasks
    without a reference (token-id prompts) have no accuracy and no chart."""
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in summary:
        if r["correct"] is not None:
            groups[(r["model"], r["task"])].setdefault(f"T={r['temperature']:g} {r['rule']}", r)
    charts = []
    for (model, task), by_setting in sorted(groups.items()):
        bars = [
            (
                label,
                f"{label}: {r['correct']} of {r['n']}",
                r["accuracy"],
                "#7f7f7f",
                wilson_interval(r["correct"], r["n"]),
            )
            for label, r in sorted(by_setting.items())
        ]
        charts.append(_bar_chart(f"{model}/{task}", bars, "", "accuracy", top=1.0))
    return "".join(charts)


def _exactness_table(summary: list[dict], rows: list[dict]) -> str:
    verdicts: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        verdicts[_arm(r)][r["verdict"]] += 1
    head = (
        "<tr><th>arm</th><th>n</th><th>exact</th><th>near-tie</th><th>logic-error</th><th>distribution</th>"
        "<th>exact rate</th></tr>"
    )
    body = "".join(
        f'<tr class="{"ok" if r["exact_rate"] in (1, None) else "bad"}"><td>{_e(_arm(r))}</td><td>{r["n"]}</td>'
        + "".join(f"<td>{verdicts[_arm(r)][v]}</td>" for v in ("exact", "near-tie", "logic-error", "distribution"))
        + f"<td>{_pct(r['exact_rate'])}</td></tr>"
        for r in summary
    )
    note = (
        "<p>distribution: rejection-sampling rows at T&gt;0, equal to plain decoding in distribution "
        "(a statistical test), not token for token, so not token-checked.</p>"
        if any(r["distribution_n"] for r in summary)
        else ""
    )
    return f"<table>{head}{body}</table>{note}"


def _ar_table(summary: list[dict]) -> str:
    """Tau (tokens per verify pass), tokens per forward of the target's network (a drafter's forwards
    on it counted), the speedups and the acceptance at each draft depth."""
    ar = [r for r in summary if r["rule"] == AR_RULE]
    if not ar:
        return ""
    head = (
        "<tr><th>arm</th><th>sampling</th><th>n</th><th>tau</th><th>tokens per target forward</th>"
        "<th>speedup nfe</th><th>speedup wall (95% over prompts; robust, disturbed rows)</th>"
        "<th>acceptance per depth</th></tr>"
    )
    body = "".join(
        f"<tr><td>{_e(_arm(r))}</td><td>{_e(r['ar_sampling'])}</td><td>{r['n']}</td><td>{r['mean_accept_len']:.2f}</td>"
        f"<td>{r['tokens_per_target_forward']:.2f}</td><td>{_x(r['speedup_nfe'])}</td><td>{_wall(r)}</td>"
        f"<td>{', '.join(f'{a:.2f}' for a in r['accept_rate_per_depth'])}</td></tr>"
        for r in ar
    )
    return f"<table>{head}{body}</table>"


def _throughput_table(summary: list[dict]) -> str:
    """Per arm (its batch size in its name): tokens/s and prompts/s of plain and speculative decoding
    per worker, the speculative wall split into target, proposer and engine (the plain reference's
    engine share beside it) and per-prompt wall (a prompt's share of its batch's time); tokens/s and
    the p50 latency with their 95% intervals over prompts."""
    head = (
        "<tr><th>arm</th><th>tok/s plain</th><th>tok/s spec</th><th>prompts/s plain</th><th>prompts/s spec</th>"
        "<th>target</th><th>proposer</th><th>engine</th>"
        "<th>plain engine</th><th>latency plain p50 / p90 / p99 s</th><th>latency spec p50 / p90 / p99 s</th></tr>"
    )
    rows = []
    for r in summary:
        target, proposer = r.get("target_share"), r["proposer_share"]
        engine = None if target is None or proposer is None else 1 - target - proposer
        rows.append(
            f"<tr><td>{_e(_arm(r))}</td>"
            f"<td>{_num(r['plain_tokens_per_s'])}{_interval(r.get('plain_tokens_per_s_ci95'), 1)}</td>"
            f"<td>{_num(r['spec_tokens_per_s'])}{_interval(r.get('spec_tokens_per_s_ci95'), 1)}</td>"
            f"<td>{_num(r.get('plain_prompts_per_s'), 2)}</td><td>{_num(r.get('spec_prompts_per_s'), 2)}</td>"
            f"<td>{_pct(target)}</td><td>{_pct(proposer)}</td><td>{_pct(engine)}</td>"
            f"<td>{_pct(r.get('plain_engine_share'))}</td><td>{_latency(r, 'plain')}</td>"
            f"<td>{_latency(r, 'spec')}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _latency(r: dict, side: str) -> str:
    """A side's p50 / p90 / p99 latency, then its p50's 95% interval over prompts."""
    values = r.get(f"{side}_latency_s")
    if not values:
        return "-"
    return " / ".join(f"{v:.2f}" for v in values) + _interval(r.get(f"{side}_latency_p50_ci95"), label="p50 ")


def _auto_table(summary: list[dict]) -> str:
    auto = [r for r in summary if r["budget"] == AUTO]
    if not auto:
        return ""
    head = (
        "<tr><th>arm</th><th>chosen budgets</th><th>predicted speedup wall</th>"
        "<th>measured speedup wall (95% over prompts; robust, disturbed rows)</th></tr>"
    )
    body = "".join(
        f"<tr><td>{_e(_arm(r))}</td><td>{', '.join(map(str, r['chosen_budgets']))}</td>"
        f"<td>{_x(r['predicted_speedup_wall'])}</td><td>{_wall(r)}</td></tr>"
        for r in auto
    )
    return f"<table>{head}{body}</table>"


def _disturbed_table(rows: list[dict]) -> str:
    """Each row whose wall time `harness.runs.summary.wall_disturbed` flags: its walls and its pass cost (time
    per target forward over its plain reference's) beside its arm's median."""
    flags = wall_disturbed(rows)
    if not any(flags):
        return "<p>none: every row's pass cost is within 3x of its arm's median</p>"
    costs: defaultdict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if math.isfinite(cost := pass_cost(r)):
            costs[tuple(r[k] for k in SUMMARY_KEY)].append(cost)
    head = (
        "<tr><th>arm</th><th>prompt</th><th>seed</th><th>plain wall s</th><th>spec wall s</th>"
        "<th>pass cost (x plain pass)</th><th>arm's median</th></tr>"
    )
    body = "".join(
        f'<tr class="bad"><td>{_e(_arm(r))}</td><td>{_e(r["sample_id"])}</td><td>{r["seed"]}</td>'
        f"<td>{r['plain_wall_s']:.3f}</td><td>{r['spec_wall_s']:.3f}</td><td>{pass_cost(r):.2f}</td>"
        f"<td>{statistics.median(costs[tuple(r[k] for k in SUMMARY_KEY)]):.2f}</td></tr>"
        for r, off in zip(rows, flags)
        if off
    )
    return f"<table>{head}{body}</table>"


def _loads_table(manifest: dict[str, Any]) -> str:
    """Each session's workers and what loading each model cost them (`cluster.provenance.measure_load`)."""
    loads = [load for session in manifest.get("sessions", []) for load in session.get("loads") or []]
    if not loads:
        return ""
    head = "<tr><th>worker</th><th>model</th><th>device</th><th>dtype</th><th>load s</th><th>peak memory</th></tr>"
    body = "".join(
        f"<tr><td>{_e(r['worker'])}</td><td>{_e(r['model'])}</td><td>{_e(r['device'])}</td>"
        f"<td>{_e(r['dtype'])}</td><td>{r['load_s']:.2f}</td>"
        f"<td>{r['peak_memory_bytes'] / 2**20:.0f} MiB ({_e(r['memory'])})</td></tr>"
        for r in loads
    )
    return f"<table>{head}{body}</table>"


def _accuracy_table(summary: list[dict]) -> str:
    head = (
        "<tr><th>arm</th><th>n</th><th>accuracy (plain)</th><th>accuracy (spec)</th>"
        "<th>mean accept len</th><th>speedup nfe (95% over prompts)</th>"
        "<th>speedup wall (95% over prompts; robust, disturbed rows)</th>"
        "<th>stale hit rate</th></tr>"
    )
    body = "".join(
        f"<tr><td>{_e(_arm(r))}</td><td>{r['n']}</td><td>{_pct(r['accuracy'])}</td><td>{_pct(r['spec_accuracy'])}</td>"
        f"<td>{r['mean_accept_len']:.2f}</td><td>{r['speedup_nfe']:.2f}x{_interval(r.get('speedup_nfe_ci95'))}</td>"
        f"<td>{_wall(r)}</td>"
        f"<td>{_pct(r['stale_hit_rate'])}</td></tr>"
        for r in summary
    )
    return f"<table>{head}{body}</table>"


def _line_chart(title: str, series: list[tuple[str, str, list[tuple[float, float]]]], xlabel: str, ylabel: str) -> str:
    points = [p for _, _, pts in series for p in pts]
    if not points:
        return ""
    xs, ys = [x for x, _ in points], [y for _, y in points] + [0.0, 1.0]
    sx, sy = _scale(min(xs), max(xs), PAD, W - 10), _scale(0.0, max(ys) * 1.1, H - PAD, 20)
    parts = [_axes(title, xlabel, ylabel, sorted(set(xs)), sx, _ticks(max(ys) * 1.1), sy)]
    parts.append(f'<line x1="{PAD}" x2="{W - 10}" y1="{sy(1):.1f}" y2="{sy(1):.1f}" class="unit"/>')
    for stroke, dash, pts in series:
        if not pts:
            continue
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{stroke}" stroke-width="2"'
            f' stroke-dasharray="{dash or "none"}"/>'
        )
        parts += [
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{stroke}"><title>{x}: {y:.3f}x</title></circle>'
            for x, y in pts
        ]
    return _svg(parts)


def _bar_chart(title: str, bars: list[tuple], xlabel: str, ylabel: str, top: float | None = None) -> str:
    """bars: (short label under the bar, full label in its tooltip, value, colour[, (low, high)])."""
    top = top or max([b[2] for b in bars] + [1e-9]) * 1.1
    sy = _scale(0.0, top, H - PAD, 20)
    slot = (W - PAD - 10) / max(1, len(bars))
    parts = [_axes(title, xlabel, ylabel, [], None, _ticks(top), sy)]
    for i, (label, full, value, fill, *interval) in enumerate(bars):
        x = PAD + i * slot + slot * 0.15
        parts.append(
            f'<rect x="{x:.1f}" y="{sy(value):.1f}" width="{slot * 0.7:.1f}" '
            f'height="{max(0.0, H - PAD - sy(value)):.1f}" fill="{fill}"><title>{_e(full)}: '
            f"{value:.4g}</title></rect>"
        )
        if interval:
            (low, high), mid = interval[0], x + slot * 0.35
            parts.append(
                f'<path d="M{mid - 4:.1f},{sy(high):.1f}h8M{mid:.1f},{sy(high):.1f}V{sy(low):.1f}'
                f'M{mid - 4:.1f},{sy(low):.1f}h8" stroke="#000" fill="none"/>'
            )
        if len(bars) <= 12:
            parts.append(
                f'<text x="{x + slot * 0.35:.1f}" y="{H - PAD + 12}" class="tick" '
                f'text-anchor="middle">{_e(label)}</text>'
            )
    return _svg(parts)


def _axes(title: str, xlabel: str, ylabel: str, xticks: list, sx, yticks: list[float], sy) -> str:
    parts = [
        f'<text x="{W / 2}" y="13" class="title" text-anchor="middle">{_e(title)}</text>',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 10}" y2="{H - PAD}" class="axis"/>',
        f'<line x1="{PAD}" y1="20" x2="{PAD}" y2="{H - PAD}" class="axis"/>',
        f'<text x="{W / 2}" y="{H - 8}" class="label" text-anchor="middle">{_e(xlabel)}</text>',
        (
            f'<text x="11" y="{H / 2}" class="label" text-anchor="middle" '
            f'transform="rotate(-90 11 {H / 2})">{_e(ylabel)}</text>'
        ),
    ]
    parts += [f'<text x="{PAD - 4}" y="{sy(v) + 3:.1f}" class="tick" text-anchor="end">{v:g}</text>' for v in yticks]
    if sx:
        parts += [
            f'<text x="{sx(v):.1f}" y="{H - PAD + 12}" class="tick" text-anchor="middle">{v:g}</text>' for v in xticks
        ]
    return "".join(parts)


def _svg(parts: list[str]) -> str:
    return f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img">{"".join(parts)}</svg>'


def _scale(lo: float, hi: float, out_lo: float, out_hi: float):
    span = (hi - lo) or 1.0
    return lambda v: out_lo + (v - lo) / span * (out_hi - out_lo)


def _ticks(top: float) -> list[float]:
    step = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 1e9) if top / s <= 6)
    return [round(i * step, 6) for i in range(int(top / step) + 1)]


def _panel(r: dict) -> str:
    return f"{r['model']}/{r['task']} T={r['temperature']:g} {r['rule']} batch {r['batch_size']}"


def _arm(r: dict) -> str:
    return f"{_panel(r)} {r['proposer']}@{'auto' if r['budget'] == AUTO else r['budget']}"


def _section(title: str, content: str) -> str:
    return f"<section><h2>{_e(title)}</h2><div class='charts'>{content or '<p>no data</p>'}</div></section>"


def _text(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _interval(bounds: list[float] | None, digits: int = 2, label: str = "") -> str:
    return "" if bounds is None else f" ({label}{bounds[0]:.{digits}f}-{bounds[1]:.{digits}f})"


def _wall(r: dict) -> str:
    """speedup_wall with its interval, then the robust figure and the rows it left out."""
    robust = f"; robust {_x(r['speedup_wall_robust'])}, {r['disturbed_rows']} of {r['n']} disturbed"
    return f"{_x(r['speedup_wall'])}{_interval(r['speedup_wall_ci95'])}{robust}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _e(text: Any) -> str:
    return html.escape(str(text))


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 20px; color: #222; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 15px; margin-top: 24px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
table.meta th {{ background: #f4f4f4; }} tr.bad td {{ background: #fdd; }} tr.ok td:last-child {{ color: #080; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 12px; }}
svg {{ border: 1px solid #ddd; background: #fff; }}
svg .title {{ font-size: 11px; font-weight: 600; }} svg .label {{ font-size: 10px; }}
svg .tick {{ font-size: 9px; fill: #555; }} svg .axis {{ stroke: #333; }}
svg .unit {{ stroke: #aaa; stroke-dasharray: 2,3; }}
.key {{ display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }}
</style></head>
<body><h1>{title}</h1><p>proposers: {legend}</p>
{body}
</body></html>
"""

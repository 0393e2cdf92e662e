"""The run's figures as SVG charts drawn by hand rather than with a plotting library, so the page has no
dependency, opens offline anywhere and stays small: speedup against budget per proposer (the wall
line is the robust figure, without disturbed rows), histograms of transitions committed per pass,
target passes per generated token, and the plain reference's accuracy with its Wilson interval.
"""

from __future__ import annotations

import html
from collections import defaultdict
from typing import Any

from harness.gate import wilson_interval
from harness.reports.tables import arm, panel
from harness.runs.schema import AUTO

W, H, PAD = 360, 220, 42


def speedup_charts(summary: list[dict], colour: dict[str, str]) -> str:
    panels: defaultdict[str, defaultdict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in summary:
        if r["budget"] != AUTO:  # an auto arm has no place on the budget axis: its own table below
            panels[panel(r)][r["proposer"]].append(r)
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


def accept_histograms(rows: list[dict], colour: dict[str, str]) -> str:
    largest: dict[tuple, int] = {}
    for r in rows:
        key = (panel(r), r["proposer"])
        largest[key] = max(largest.get(key, 0), r["budget"])
    counts: dict[tuple, list[int]] = {}
    for r in rows:
        key = (panel(r), r["proposer"])
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
    for (where, proposer), hist in sorted(counts.items()):
        bars = [(str(i + 1), f"{i + 1} per pass", c, colour[proposer]) for i, c in enumerate(hist)]
        title = f"{where} {proposer}@{largest[where, proposer]}"
        charts.append(_bar_chart(title, bars, "transitions per pass", "passes"))
    return "".join(charts)


def nfe_per_token(summary: list[dict], colour: dict[str, str]) -> str:
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
            (f"T={r['temperature']:g}", arm(r), r["spec_nfe_per_token"], colour[r["proposer"]])
            for r in sorted(arms, key=lambda r: (r["proposer"], r["temperature"], r["rule"]))
        ]
        charts.append(_bar_chart(f"{model}/{task} (budget {top})", bars, "", "passes per token"))
    return "".join(charts)


def accuracy_charts(summary: list[dict]) -> str:
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


def _e(text: Any) -> str:
    return html.escape(str(text))

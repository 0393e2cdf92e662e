"""`report.html`: one self-contained page per run directory (inline CSS and SVG, no script, no network):
the run's charts (`harness.reports.charts`) and its measured tables (`harness.reports.tables`).
"""

from __future__ import annotations

import html

from harness.reports import charts
from harness.reports.tables import (
    Table,
    accuracy_table,
    ar_table,
    auto_table,
    disturbed_table,
    exactness_table,
    loads_table,
    replay_table,
    run_facts,
    throughput_table,
    verified_run,
)
from harness.runs.run_dir import RunDir

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def render_report(run: RunDir) -> str:
    """The page of a verified run (a damaged one is refused, naming the damage)."""
    verified = verified_run(run)
    summary, rows = verified.summary, verified.rows
    proposers = sorted({r["proposer"] for r in summary})
    colour = {p: COLOURS[i % len(COLOURS)] for i, p in enumerate(proposers)}
    facts = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in run_facts(verified.manifest, len(rows)))
    sections = [
        f'<table class="meta">{facts}</table>',
        _section(
            "Speedup vs budget (solid: target passes, dashed: wall time without disturbed rows)",
            charts.speedup_charts(summary, colour),
        ),
        _section("Transitions committed per pass (largest budget)", charts.accept_histograms(rows, colour)),
        _section("Target passes per generated token", charts.nfe_per_token(summary, colour)),
        _table(auto_table(summary)),
        _table(throughput_table(summary)),
        _table(disturbed_table(rows)),
        _table(exactness_table(summary, rows)),
        _table(replay_table(summary)),
        _table(loads_table(verified.manifest)),
        _table(ar_table(summary)),
        _section("Accuracy of the plain reference (95% Wilson interval)", charts.accuracy_charts(summary)),
        _table(accuracy_table(summary)),
    ]
    legend = " ".join(f'<span class="key" style="background:{colour[p]}"></span>{_e(p)}' for p in proposers)
    return PAGE.format(title=_e(f"spotbench run {run.path.name}"), legend=legend, body="\n".join(sections))


def write_report(run: RunDir) -> str:
    path = run.path / "report.html"
    path.write_text(render_report(run), encoding="utf-8")
    return str(path)


def _table(table: Table) -> str:
    if not table.rows:
        return _section(table.title, f"<p>{_e(table.empty)}</p>")
    head = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in table.head) + "</tr>"
    marks = table.marks or [""] * len(table.rows)
    body = "".join(
        (f'<tr class="{mark}">' if mark else "<tr>") + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>"
        for cells, mark in zip(table.rows, marks)
    )
    note = f"<p>{_e(table.note)}</p>" if table.note else ""
    return _section(table.title, f"<table>{head}{body}</table>{note}")


def _section(title: str, content: str) -> str:
    return f"<section><h2>{_e(title)}</h2><div class='charts'>{content or '<p>no data</p>'}</div></section>"


def _e(text: object) -> str:
    return html.escape(str(text), quote=False)


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

"""`spotbench report RUN_DIR --markdown`: the run's measured tables as Markdown, so a table on a docs
page is the run's own figures (the same cells as report.html's tables, `harness.reports.tables`)."""

from __future__ import annotations

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


def render_markdown(run: RunDir) -> str:
    """The verified run's facts and tables (a damaged run is refused, naming the damage); a table with
    no rows says why in one line, so every section of every run is there."""
    verified = verified_run(run)
    summary, rows = verified.summary, verified.rows
    facts = Table("Run", ["setting", "value"], [list(fact) for fact in run_facts(verified.manifest, len(rows))])
    tables = [
        facts,
        accuracy_table(summary),
        exactness_table(summary, rows),
        replay_table(summary),
        throughput_table(summary),
        auto_table(summary),
        ar_table(summary),
        disturbed_table(rows),
        loads_table(verified.manifest),
    ]
    return f"# spotbench run {run.path.name}\n\n" + "\n".join(markdown_table(t) for t in tables)


def markdown_table(table: Table) -> str:
    lines = [f"## {table.title}", ""]
    if not table.rows:
        return "\n".join([*lines, table.empty, ""])
    lines += [_line(table.head), "|" + "---|" * len(table.head)]
    lines += [_line(cells) for cells in table.rows]
    if table.note:
        lines += ["", table.note]
    return "\n".join([*lines, ""])


def _line(cells: list[str]) -> str:
    """One table row; a `|` or a line break inside a cell would end the cell, so they are escaped."""
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

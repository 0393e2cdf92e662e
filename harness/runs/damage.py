"""What cannot be trusted in a run directory, one line each, and the lines that refuse it.

A damaged sample file (cut short, flipped, edited, foreign) is recomputable: a resumed run moves it
aside and decodes its group again. Records (manifest, index, summary) that disagree with rows sound
on their own are not: nothing tells which side is right, so a resumed run refuses, and `report` and
`gate` refuse either kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Damage:
    """One file that cannot be trusted (or is missing), with what is wrong and which group it held."""

    file: str
    """Relative to the run directory (`samples/<name>.parquet`, `index.jsonl`, `summary.parquet`)."""
    problem: str
    group: str | None = None
    recomputable: bool = True
    """A sample file or an index line: a resumed run moves it aside and decodes its group again. False:
    the run's records (manifest, index, summary) disagree with rows that are sound on their own, and
    nothing tells which side is right, so a resumed run refuses (`resume_refusal`)."""

    def line(self) -> str:
        return f"{self.file}{f' ({self.group})' if self.group else ''}: {self.problem}"




RESTORE = "restore the run directory from a copy, or run into a new output directory"
"""The way out of records that disagree with the rows (a resumed run cannot rebuild them)."""


def damage_message(directory: Path, damage: list[Damage]) -> str:
    """One line for commands that refuse a damaged run (report, gate)."""
    records = [d for d in damage if not d.recomputable]
    first = (records or damage)[0]
    more = f" and {len(damage) - 1} more" if len(damage) > 1 else ""
    way_out = (
        f"its records disagree with its rows: {RESTORE}"
        if records
        else "re-running the run's command recomputes damaged groups"
    )
    return (
        f"{directory} is damaged: {first.line()}{more}; `spotbench verify {directory}` lists every problem, and "
        f"{way_out}"
    )


def resume_refusal(directory: Path, damage: list[Damage]) -> str | None:
    """The line that refuses to resume a run whose records disagree with its rows (None: resumable).

    Damaged sample files are moved aside and their groups decoded again; but rows that are sound on
    their own and disagree with the summary, the index or the manifest (a row edited and its index
    line updated, the summary left as it was) cannot be told apart from a damaged record, and a
    resumed run would rebuild the summary from them, after which `verify` would pass."""
    records = [d for d in damage if not d.recomputable]
    if not records:
        return None
    more = f" and {len(damage) - 1} more" if len(damage) > 1 else ""
    return (
        f"{directory} cannot be resumed: {records[0].line()}{more}; its records disagree with its rows, and "
        f"rebuilding from the rows would hide it: {RESTORE} (`spotbench verify {directory}` lists every problem)"
    )

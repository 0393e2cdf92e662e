"""The threshold table of docs/spot_sets.md and docs/spiffy.md from run directories (a script, not a test).

    python benchmarks/threshold_table.py RUN_DIR [RUN_DIR ...]

Reads the sample rows of every run directory given (runs of `suites/threshold-table/*.yaml`, with any
budgets: runs of one suite at other budgets add cells) and prints one Markdown table per rule. A cell
is (target, task, T, budget); each arm shows speedup_nfe (speedup_wall), both ratios of sums over
the cell's prompts (plain passes / speculative passes, plain wall / speculative wall), and the
learned arm (`spot-sets...` under a threshold rule, `spot...` under top1) is divided by each baseline
(`confidence`: under a threshold rule the confidence-set, and `spiffy...`) with a paired 95% interval
over resampled prompts (`harness/bootstrap.py`). `exact` is the share of the cell's rows, over every
arm, that are token-exact.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from harness.bootstrap import interval, resampled_speedups

COLUMNS = [
    "model",
    "task",
    "temperature",
    "rule",
    "budget",
    "proposer",
    "sample_id",
    "plain_nfe",
    "spec_nfe",
    "plain_wall_s",
    "spec_wall_s",
    "exact",
]
ROLES = (("spot-sets", "SPOT-Sets"), ("spot", "SPOT"), ("spiffy", "Spiffy"), ("confidence", "confidence"))
"""Table column of a proposer, by its registry name (before any `:` argument)."""
LEARNED = ("SPOT-Sets", "SPOT")


def role(proposer: str) -> str | None:
    name = proposer.partition(":")[0]
    return next((label for prefix, label in ROLES if name == prefix), None)


def read_rows(run_dirs: list[Path]) -> dict[tuple, dict[str, dict[str, dict]]]:
    """cell (model, task, T, rule, budget) -> column -> sample_id -> row; a later run of the same key wins."""
    cells: dict[tuple, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for run_dir in run_dirs:
        files = sorted((run_dir / "samples").glob("*.parquet"))
        if not files:
            raise SystemExit(f"{run_dir} holds no sample rows (samples/*.parquet): is it a run directory?")
        for path in files:
            for row in pq.read_table(path, columns=COLUMNS).to_pylist():
                column = role(row["proposer"])
                if column is not None:
                    key = (row["model"], row["task"], row["temperature"], row["rule"], row["budget"])
                    cells[key][column][row["sample_id"]] = row
    return cells


def ratio(rows: list[dict], numerator: str, denominator: str) -> float:
    return sum(r[numerator] for r in rows) / sum(r[denominator] for r in rows)


def render(cells: dict[tuple, dict[str, dict[str, dict]]], rule: str) -> list[str]:
    keys = sorted(k for k in cells if k[3] == rule)
    if not keys:
        return []
    columns = [label for _, label in reversed(ROLES) if any(label in cells[k] for k in keys)]
    learned = next((c for c in LEARNED if c in columns), None)
    baselines = [c for c in columns if c not in LEARNED]
    ratios = [f"{learned} / {b}" for b in baselines] if learned else []
    header = ["target", "task", "T", "budget", "n", "plain passes", *columns, *ratios, "exact"]
    lines = [f"{rule}:", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in keys:
        arms = cells[key]
        prompts = sorted(set.intersection(*(set(arms[c]) for c in arms)))
        rows = {c: [arms[c][p] for p in prompts] for c in arms}
        first = next(iter(rows.values()))
        cell = [
            f"{ratio(rows[c], 'plain_nfe', 'spec_nfe'):.2f} ({ratio(rows[c], 'plain_wall_s', 'spec_wall_s'):.2f})"
            if c in rows
            else "-"
            for c in columns
        ]
        draws = resampled_speedups([r["plain_nfe"] for r in first], {c: [r["spec_nfe"] for r in rows[c]] for c in rows})
        compared = []
        for b in baselines:
            if learned in rows and b in rows:
                low, high = interval(draws[learned] / draws[b])
                value = ratio(rows[b], "spec_nfe", "plain_nfe") * ratio(rows[learned], "plain_nfe", "spec_nfe")
                compared.append(f"{value:.3f} [{low:.3f}, {high:.3f}]")
            else:
                compared.append("-")
        every = [r for c in rows for r in rows[c]]
        exact = sum(bool(r["exact"]) for r in every) / len(every)
        model, task, temperature, _, budget = key
        lines.append(
            "| "
            + " | ".join(
                [
                    model,
                    task,
                    f"{temperature:g}",
                    str(budget),
                    str(len(prompts)),
                    str(sum(r["plain_nfe"] for r in first)),
                    *cell,
                    *compared,
                    f"{exact:.0%}",
                ]
            )
            + " |"
        )
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    cells = read_rows(args.run_dirs)
    for rule in sorted({k[3] for k in cells}, key=lambda r: (r != "top1", r)):
        print("\n".join(render(cells, rule)))


if __name__ == "__main__":
    main()

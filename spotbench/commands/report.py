"""`spotbench report RUN_DIR`: write RUN_DIR/report.html (self-contained; see harness/reports/html.py);
with `--markdown`, print the run's measured tables as Markdown instead (harness/reports/markdown.py),
for a results page whose tables are the run's own figures.

Exit status 2 (one line) for a path that is not a run directory of this schema version, a run that
has not completed, or a damaged one (`spotbench verify` lists the damage).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="write a self-contained HTML report of a run directory")
    parser.add_argument("run_dir", help="run directory (spotbench run --output)")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the run's measured tables as Markdown (for a docs page) instead of writing report.html",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.runs.run_dir import RunDir

    run_dir = RunDir.existing(args.run_dir)
    if args.markdown:
        from harness.reports.markdown import render_markdown

        print(render_markdown(run_dir), end="")
    else:
        from harness.reports.html import write_report

        print(write_report(run_dir))
    return 0

"""`spotbench report RUN_DIR`: write RUN_DIR/report.html (self-contained; see harness/report.py).

Exit status 2 (one line) for a path that is not a run directory of this schema version, a run that
has not completed, or a damaged one (`spotbench verify` lists the damage).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="write a self-contained HTML report of a run directory")
    parser.add_argument("run_dir", help="run directory (spotbench run --output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.report import write_report
    from harness.runs.run_dir import RunDir

    print(write_report(RunDir.existing(args.run_dir)))
    return 0

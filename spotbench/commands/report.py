"""`spotbench report RUN_DIR`: write RUN_DIR/report.html (self-contained; see harness/report.py)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="write a self-contained HTML report of a run directory")
    parser.add_argument("run_dir", help="run directory (spotbench run --output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.errors import UserError
    from harness.report import write_report
    from harness.results import RunDir

    if not (Path(args.run_dir) / "manifest.json").exists():
        raise UserError(f"{args.run_dir} is not a run directory (no manifest.json)")
    print(write_report(RunDir(Path(args.run_dir))))
    return 0

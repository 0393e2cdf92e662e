"""`spotbench gate RUN_DIR --baseline BASELINE`: a release gate (thresholds in harness/gate.py).

Exit status: 0 when every check passes, 1 with a table of the failing checks otherwise, 2 for bad
input (a path that is not a run directory or a summary).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from harness.gate import Thresholds

    default = Thresholds()
    parser = subparsers.add_parser("gate", help="compare a run with a baseline run; exit 1 on a regression")
    parser.add_argument("run_dir", help="run directory (spotbench run --output)")
    parser.add_argument("--baseline", required=True, help="baseline run directory or its summary.parquet")
    parser.add_argument("--accept-fraction", type=float, default=default.accept_fraction,
                        help="mean_accept_len must be at least this fraction of the baseline's")
    parser.add_argument("--nfe-band", type=float, default=default.nfe_band,
                        help="relative band around the baseline's speedup_nfe")
    parser.add_argument("--wall-band", type=float, default=default.wall_band,
                        help="relative band around the baseline's speedup_wall")
    parser.add_argument("--z", type=float, default=default.z, help="z of the Wilson bound on accuracy")
    parser.add_argument("--all", action="store_true", help="show passing checks too")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.gate import Thresholds, gate, load_summary, render

    rows, status = load_summary(args.run_dir)
    baseline, _ = load_summary(args.baseline)
    checks = gate(rows, baseline, status,
                  Thresholds(args.accept_fraction, args.nfe_band, args.wall_band, args.z))
    print(render(checks, args.all))
    return 0 if all(c.ok for c in checks) else 1

"""`spotbench gate RUN_DIR --baseline BASELINE`: a release gate (thresholds in harness/gate.py).

Exit status: 0 when every check passes, 1 with a table of the failing checks otherwise, 2 for bad
input: a path that is not a run directory or a summary, a --wall-band over a passes-only run, a
damaged run (`spotbench verify` lists the damage), a baseline whose digest is not the one given with
--baseline-digest, or two runs whose settings that change results (checkpoint, proposer and data
bytes among them) differ (without --allow-config-diff).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from harness.gate import Thresholds

    default = Thresholds()
    parser = subparsers.add_parser("gate", help="compare a run with a baseline run; exit 1 on a regression")
    parser.add_argument("run_dir", help="run directory (spotbench run --output)")
    parser.add_argument("--baseline", required=True, help="baseline run directory or its summary.parquet")
    parser.add_argument(
        "--baseline-digest",
        help="the baseline run's digest as a release recorded it (spotbench "
        "run and verify print it): refuse any other baseline",
    )
    parser.add_argument(
        "--accept-fraction",
        type=float,
        default=default.accept_fraction,
        help="mean_accept_len must be at least this fraction of the baseline's",
    )
    parser.add_argument(
        "--nfe-band", type=float, default=default.nfe_band, help="relative band around the baseline's speedup_nfe"
    )
    parser.add_argument(
        "--wall-band",
        type=float,
        help=f"relative band around the baseline's speedup_wall_robust (disturbed rows left out; default "
        f"{default.wall_band}; refused over a passes-only run, whose replayed rows have no wall time)",
    )
    parser.add_argument("--z", type=float, default=default.z, help="z of the Wilson bound on accuracy")
    parser.add_argument("--all", action="store_true", help="show passing checks too")
    parser.add_argument(
        "--allow-config-diff",
        action="store_true",
        help="compare runs whose settings differ (limit, split, seeds, lengths, ...) with a warning",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import sys

    from harness.gate import Thresholds, check_digest, config_warning, gate, load_summary, render, wall_band_for
    from harness.validation import Fraction, NonNegative, check_value

    # thresholds first: nan, a fraction above 1, a negative band or z would fail a run against itself
    thresholds = Thresholds(
        check_value(Fraction, args.accept_fraction, "--accept-fraction"),
        check_value(NonNegative, args.nfe_band, "--nfe-band"),
        None if args.wall_band is None else check_value(NonNegative, args.wall_band, "--wall-band"),
        check_value(NonNegative, args.z, "--z"),
    )
    if args.baseline_digest is not None:
        check_digest(args.baseline, args.baseline_digest)
    run_summary, baseline = load_summary(args.run_dir), load_summary(args.baseline)
    thresholds = dataclasses.replace(thresholds, wall_band=wall_band_for(run_summary, baseline, thresholds.wall_band))
    warning = config_warning(run_summary, baseline, args.allow_config_diff)
    if warning:
        print(f"spotbench: {warning}", file=sys.stderr)
    checks = gate(run_summary.rows, baseline.rows, run_summary.status, thresholds)
    print(render(checks, args.all))
    return 0 if all(c.ok for c in checks) else 1

"""`spotbench verify RUN_DIR`: check every sample file of a run against its index, its own rows and the
manifest, and a complete run's summary against its rows (`harness.runs.verify`).

Exit status: 0 when every file is intact (one summary line and, for a complete run, its digest), 1
with one line per damaged, missing, misfiled or duplicated file or record, 2 for bad input (not a
run directory, an unreadable manifest, a run of another schema version). `run` (on resume),
`report` and `gate` run the same checks.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("verify", help="check a run directory's files (checksums, one row per key)")
    parser.add_argument("run_dir", help="run directory (spotbench run --output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.runs.files import run_digest
    from harness.runs.run_dir import RunDir

    directory = RunDir.existing(args.run_dir)
    verification = directory.verify()
    for damage in verification.damage:
        print(f"{directory.path}/{damage.line()}")
    if verification.damage:
        return 1
    rows = sum(t.num_rows for t in verification.parts.values())
    status = directory.manifest().get("status")
    print(
        f"{directory.path}: ok: {len(verification.done_arms())} groups in {len(verification.parts)} files, "
        f"{rows} rows, each once (sha256 and Parquet page checksums match)"
        + (", summary recomputed from the rows" if status == "complete" else f"; status {status}")
    )
    if status == "complete":
        print(f"digest {run_digest(directory.path)}")
    return 0

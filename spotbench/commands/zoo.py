"""`spotbench zoo`: list the committed tiny trained targets."""

from __future__ import annotations

import argparse
import dataclasses
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("zoo", help="list the tiny trained targets that ship with spotbench")
    parser.add_argument("--json", action="store_true", help="print one JSON object per model")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.targets.zoo import zoo_entry, zoo_names

    entries = [zoo_entry(name) for name in zoo_names()]
    if args.json:
        for entry in entries:
            print(json.dumps(dataclasses.asdict(entry)))
        return 0
    header = f"{'name':<12} {'family':<9} {'params':>11} {'size MiB':>9} {'train tokens':>13} {'held-out loss':>14}"
    print(header)
    for e in entries:
        note = "" if e.finished else f"  (training unfinished: resume with its recipe, {e.recipe})"
        print(
            f"{e.name:<12} {e.family:<9} {e.parameters:>11,} {e.size_bytes / 2**20:>9.2f} "
            f"{e.training_tokens:>13,} {e.heldout_loss:>14.3f}{note}"
        )
    if not entries:
        print("(no zoo models built; see zoo/README.md)")
    return 0

"""`spotbench train-proposer`: train a SPOT proposer on plain trajectories of one target.

Everything is fixed by a recipe (YAML, see `zoo/proposers/`): target, train-split prompts (zero-shot),
temperatures, model size and optimisation. A recipe that names a `rule` (threshold:TAU) trains
SPOT-Sets on plain threshold trajectories, any other trains SPOT (`proposers.spot_sets.training.
train_from_recipe`; this command reads the flags and the train-split prompts).
Deterministic by seed; re-running resumes from the run folder. The checkpoint (safetensors + json
with provenance) lands in `--out`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spotbench.commands import add_recipe_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train-proposer", help="train a SPOT proposer on a target's plain trajectories (train splits)"
    )
    add_recipe_arguments(parser, "zoo/proposers/spot-sdar-a.yaml", "checkpoint folder")
    parser.add_argument("--run-dir", help="collected data and resumable state (default: OUT/run)")
    parser.add_argument(
        "--workers", default="1", help="collect with this many processes (Ray, one CPU each; the data does not change)"
    )
    parser.add_argument("--address", help="collect on an existing Ray cluster (host:port or auto); default: local")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import functools

    import torch

    from cluster.ordered import map_in_order
    from cluster.runner import check_address
    from harness.validation import Count, check_value
    from proposers.spot_sets.training import load_spot_family_recipe, train_from_recipe
    from tasks.registry import train_prompts

    torch.set_num_threads(1)
    recipe = load_spot_family_recipe(args.recipe, args.steps)
    workers = check_value(Count, args.workers, "--workers")
    out = Path(args.out)
    if args.address:
        check_address(args.address)  # now, not after the teachers load and the bar starts
    map_chunks = None
    if workers > 1 or args.address:
        map_chunks = functools.partial(map_in_order, workers=workers, address=args.address)
    run_dir = Path(args.run_dir) if args.run_dir else out / "run"
    report = train_from_recipe(recipe, train_prompts, run_dir, out, map_chunks)
    print(json.dumps({k: report[k] for k in ("provenance", "examples", "validation", "steps")}))
    return 0

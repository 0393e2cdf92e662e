"""`spotbench train-proposer`: train a SPOT proposer on plain trajectories of one target.

Everything is fixed by a recipe (YAML, see `zoo/proposers/`): target, train-split prompts (zero-shot),
temperatures, model size and optimisation. A recipe that names a `rule` (threshold:TAU) trains
SPOT-Sets on plain threshold trajectories (`proposers.spot_sets.training`), any other trains SPOT.
Deterministic by seed; re-running resumes from the run folder. The checkpoint (safetensors + json
with provenance) lands in `--out`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
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
    from harness.recipes import load_recipe
    from harness.targets.registry import load_dlm_target
    from harness.validation import Count, check_value, read_mapping
    from proposers.spot import training as spot_training
    from proposers.spot.collection import recipe_jobs
    from proposers.spot.recipe import SpotRecipe
    from proposers.spot_sets import training as spot_sets_training
    from tasks.registry import train_prompts

    torch.set_num_threads(1)
    sets = "rule" in read_mapping(args.recipe, "recipe")
    kind: type[SpotRecipe] | type[spot_sets_training.SpotSetsRecipe] = (
        spot_sets_training.SpotSetsRecipe if sets else SpotRecipe
    )
    train: Callable[..., dict] = spot_sets_training.train if sets else spot_training.train
    recipe = load_recipe(kind, args.recipe, {"steps": args.steps})
    workers = check_value(Count, args.workers, "--workers")
    out = Path(args.out)
    if args.address:
        check_address(args.address)  # now, not after the teachers load and the bar starts
    target = load_dlm_target(recipe.target, what="SPOT")
    jobs = recipe_jobs(recipe, train_prompts(recipe.tasks, target.tokenizer))
    map_chunks = None
    if workers > 1 or args.address:
        map_chunks = functools.partial(map_in_order, workers=workers, address=args.address)
    report = train(recipe, target, jobs, Path(args.run_dir) if args.run_dir else out / "run", out, map_chunks)
    print(json.dumps({k: report[k] for k in ("provenance", "examples", "validation", "steps")}))
    return 0

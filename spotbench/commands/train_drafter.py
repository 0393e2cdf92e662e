"""`spotbench train-drafter`: distil a Psi-Spec drafter (gated LoRA) for an autoregressive target."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spotbench.commands import add_recipe_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train-drafter", help="distil a Psi-Spec drafter (gated LoRA) for an AR target from a recipe (resumes)"
    )
    add_recipe_arguments(parser, "zoo/drafters/psi-ar-a.yaml", "drafter folder; re-running resumes an unfinished run")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.errors import UserError
    from harness.targets.registry import load_ar_only, target_kind
    from proposers.psi.training import DrafterRecipe, train_drafter
    from tasks.registry import train_answers

    recipe = DrafterRecipe.load(args.recipe, args.steps)
    if target_kind(recipe.base) != "ar":
        raise UserError(
            f"recipe {args.recipe}: base {recipe.base!r} is not an autoregressive target; Psi-Spec "
            "drafts for causal LMs (smollm2, ar-a, a causal-LM folder)"
        )
    target = load_ar_only(recipe.base, args.device, "float32", what="Psi-Spec")
    pairs = train_answers(recipe.tasks, target.tokenizer, recipe.samples_per_task)
    meta = train_drafter(recipe, target, pairs, Path(args.out))
    print(json.dumps({k: meta[k] for k in ("base", "base_hash", "steps", "train_seconds")} | {"curve": meta["curve"]}))
    return 0

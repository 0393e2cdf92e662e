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

    recipe = DrafterRecipe.load(args.recipe, args.steps)
    if target_kind(recipe.base) != "ar":
        raise UserError(
            f"recipe {args.recipe}: base {recipe.base!r} is not an autoregressive target; Psi-Spec "
            "drafts for causal LMs (smollm2, ar-a, a causal-LM folder)"
        )
    target = load_ar_only(recipe.base, args.device, "float32", what="Psi-Spec")
    meta = train_drafter(recipe, target, task_pairs(recipe, target), Path(args.out))
    print(json.dumps({k: meta[k] for k in ("base", "base_hash", "steps", "train_seconds")} | {"curve": meta["curve"]}))
    return 0


def task_pairs(recipe, target) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, reference answer ids) of the recipe's tasks' train splits, prompts built for the
    base (its chat template, if any); only train splits: nothing from a test split trains a drafter."""
    from tasks.base import prompt_ids
    from tasks.registry import get_task

    limit = recipe.validation_prompts + recipe.train_examples if recipe.train_examples else None
    pairs = []
    for name in recipe.tasks:
        task = get_task(name, num_fewshot=0)
        for sample in task.load("train", limit=limit):
            pairs.append(
                (
                    prompt_ids(task, sample, target.tokenizer),
                    target.tokenizer.encode(sample.target, add_special_tokens=False),
                )
            )
    return pairs

"""`spotbench convert`: turn an autoregressive LM into a block-diffusion target (docs/converted.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spotbench.commands import add_recipe_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert an AR LM (smollm2, a Llama/Qwen2/Qwen3 causal-LM folder) into a block-diffusion "
        "target by training a gated adapter from a recipe (resumes)",
    )
    add_recipe_arguments(
        parser,
        "zoo/recipes/sdar-smollm2.yaml",
        "run folder (train_state.pt, model/); re-running resumes an unfinished conversion",
    )
    parser.add_argument(
        "--stop-after-minutes",
        type=float,
        default=None,
        help="checkpoint and stop after this much training time (re-run to resume)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from harness.errors import UserError
    from harness.targets.base_context import base_context_length
    from harness.targets.registry import load_target
    from harness.training.convert import ConvertRecipe, check_layout, check_out_dir, held_out_first, train_conversion
    from tasks.registry import train_answers

    recipe = ConvertRecipe.load(args.recipe, args.steps)
    check_out_dir(Path(args.out))
    if args.stop_after_minutes is not None and not args.stop_after_minutes > 0:
        raise UserError(f"--stop-after-minutes must be positive, got {args.stop_after_minutes}")
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    check_base(recipe.base, f"recipe {args.recipe}")
    check_layout(recipe, base_context_length(recipe.base), f"recipe {args.recipe}")  # before anything is allocated
    base = load_target(recipe.base, "cpu", "float32")
    stop = args.stop_after_minutes * 60 if args.stop_after_minutes else None
    per_task = [train_answers([name], base.tokenizer, recipe.samples_per_task) for name in recipe.tasks]
    pairs = held_out_first(per_task, recipe.validation_examples)
    report = train_conversion(recipe, base, pairs, Path(args.out), stop)
    print(json.dumps({k: report[k] for k in ("name", "steps", "finished", "train_seconds", "heldout_loss")}))
    return 0


def check_base(name: str, where: str) -> None:
    """The base names an autoregressive target that exists, checked without loading it: a path that
    is not there is named as missing, not as a target of the wrong kind."""
    from harness.errors import UserError
    from harness.targets.ar import SMOLLM2, check_ar_name
    from harness.targets.registry import target_kind
    from harness.targets.zoo import zoo_names

    named = name == SMOLLM2 or name.startswith("tiny-random") or name in zoo_names()  # not paths
    if not named and not Path(name).exists():
        raise UserError(
            f"{where}: base {name} does not exist; give smollm2, tiny-random-ar[:SEED], or a causal-LM "
            "folder or GGUF file"
        )
    if target_kind(name) != "ar":
        raise UserError(
            f"{where}: base {name!r} is not an autoregressive target; convert "
            "a causal LM (smollm2, a Llama/Qwen2/Qwen3 causal-LM folder)"
        )
    check_ar_name(name)

"""`spotbench train-tokenizer` and `spotbench train-target`: build the embedded default's models."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spotbench.commands import add_recipe_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    tok = subparsers.add_parser("train-tokenizer", help="train the project's BPE tokenizer on training splits only")
    tok.add_argument("--tasks", default="arith,gsm8k,mbpp", help="comma-separated task names")
    tok.add_argument("--vocab-size", type=int, default=2048)
    tok.add_argument("--out", required=True, help="output folder (Hugging Face tokenizer format)")
    tok.set_defaults(func=run_tokenizer)

    target = subparsers.add_parser(
        "train-target", help="train a tiny target DLM from a recipe (resumes an interrupted run)"
    )
    add_recipe_arguments(target, "zoo/recipes/sdar-a.yaml", "run folder; re-running resumes from it")
    target.set_defaults(func=run_target)


def run_tokenizer(args: argparse.Namespace) -> int:
    from harness.training.tokenizer import train_bpe_tokenizer
    from tasks.registry import train_pairs

    pairs = train_pairs(args.tasks.split(","))
    tokenizer = train_bpe_tokenizer((prompt + answer for prompt, answer in pairs), args.vocab_size)
    tokenizer.save_pretrained(args.out)
    print(f"tokenizer with {len(tokenizer)} tokens trained on {len(pairs)} examples -> {args.out}")
    return 0


def run_target(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from harness.errors import UserError
    from harness.recipes import load_recipe
    from harness.training.corpus import encode_examples
    from harness.training.train_target import Recipe, train
    from tasks.registry import train_pairs

    recipe = load_recipe(Recipe, args.recipe, {"steps": args.steps})
    tokenizer_dir = Path(recipe.tokenizer)
    if not (tokenizer_dir / "tokenizer.json").exists():
        raise UserError(
            f"no tokenizer at {tokenizer_dir}; build it with "
            f"`spotbench train-tokenizer --out {tokenizer_dir}` or fix `tokenizer:` in {args.recipe}"
        )
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    examples = encode_examples(train_pairs(recipe.tasks), tokenizer, recipe)
    report = train(recipe, examples, tokenizer, Path(args.out))
    print(json.dumps(report))
    return 0

"""CLI subcommands, one module each (see spotbench.cli), and the arguments the commands that train
from a recipe share."""

from __future__ import annotations

import argparse


def add_block_length_arguments(parser: argparse.ArgumentParser) -> None:
    """`--block-length` and `--untrained-block-length` of the commands that decode: a target decodes at
    the block length it was trained at unless another is asked for, and an untrained one only when
    the study says so (`harness.targets.registry.check_block_length_for`)."""
    parser.add_argument(
        "--block-length", help="positions per block (default: the one each target was trained at, else 32)"
    )
    parser.add_argument(
        "--untrained-block-length",
        action="store_const",
        const=True,
        help="allow a block length a target was not trained at (recorded in every row)",
    )


def block_length_of(args: argparse.Namespace, model: str) -> int:
    """The block length a command that decodes one target without a suite (calibrations) uses:
    `--block-length` checked against the target's trained ones, else the trained one."""
    from harness.targets.registry import check_block_length_for, default_block_length
    from harness.validation import Count, check_value

    if args.block_length is None:
        return default_block_length(model)
    length = check_value(Count, args.block_length, "--block-length")
    check_block_length_for(model, length, bool(args.untrained_block_length))
    return length


def add_recipe_arguments(parser: argparse.ArgumentParser, example: str, out_help: str) -> None:
    """The recipe, the output folder and the steps override of a command that trains from a recipe
    (train-target, train-proposer, train-drafter): one definition, so they are named, required and
    described alike, and `--steps` is checked like the recipe's `steps:` by every `load_recipe` call."""
    parser.add_argument("recipe", help=f"recipe YAML, e.g. {example}")
    parser.add_argument("--out", required=True, help=out_help)
    parser.add_argument("--steps", help="override the recipe's number of steps (checked like its steps:)")

"""CLI subcommands, one module each (see spotbench.cli), and the arguments the commands that train
from a recipe share."""

from __future__ import annotations

import argparse


def add_recipe_arguments(parser: argparse.ArgumentParser, example: str, out_help: str) -> None:
    """The recipe, the output folder and the steps override of a command that trains from a recipe
    (train-target, train-proposer, train-drafter): one definition, so they are named, required and
    described alike, and `--steps` is checked like the recipe's `steps:` by every `load_recipe` call."""
    parser.add_argument("recipe", help=f"recipe YAML, e.g. {example}")
    parser.add_argument("--out", required=True, help=out_help)
    parser.add_argument("--steps", help="override the recipe's number of steps (checked like its steps:)")

"""The `spotbench` command line.

Each subcommand lives in its own module and exposes `register(subparsers)`, which adds its parser and
sets `func` (called with the parsed arguments, returning an exit status). Modules import their heavy
dependencies (torch, ray, datasets) inside `func`, so `spotbench --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.errors import UserError

COMMAND_MODULES = [
    "spotbench.commands.inspect_target",
    "spotbench.commands.decode",
    "spotbench.commands.train_target",
    "spotbench.commands.zoo",
    "spotbench.commands.diagnose",
    "spotbench.commands.train_proposer",
    "spotbench.commands.train_drafter",
    "spotbench.commands.convert",
    "spotbench.commands.calibrate_spiffy",
    "spotbench.commands.calibrate_spot_sets",
    "spotbench.commands.tasks_cmd",
    "spotbench.commands.run",
    "spotbench.commands.gate",
    "spotbench.commands.report",
    "spotbench.commands.verify",
    "spotbench.commands.lm_eval_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spotbench",
        description="Lossless speculative decoding benchmarks for diffusion language models.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as error:
        print(f"spotbench: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

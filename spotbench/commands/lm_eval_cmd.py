"""`spotbench lm-eval ARGS`: lm-evaluation-harness's own command line with the `spotbench` model
registered (`spotbench.lm_eval_model`); every argument goes to lm-eval unchanged, and without an
`--include_path` spotbench's own task configs are included (`tasks.lm_eval`)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    # '+' as the only prefix: every --flag is lm-eval's, passed through as it is
    parser = subparsers.add_parser(
        "lm-eval",
        prefix_chars="+",
        add_help=False,
        help="lm-eval's command line with the spotbench model: --model spotbench --model_args "
        "model=M,proposer=P,budget=K --tasks T (docs/lm_eval.md)",
    )
    parser.add_argument("lm_eval_args", nargs="*")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from spotbench.lm_eval_model import main
    from tasks.lm_eval import with_tasks

    return main(with_tasks(args.lm_eval_args))

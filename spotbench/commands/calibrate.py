"""`spotbench calibrate spot-sets[:DIR] --model M --out DIR2`: fit a SPOT-Sets checkpoint to another target.

The calibration itself is `proposers.spot_sets.calibration`; this command reads its flags, the
calibration prompts (zero-shot, train splits only, at most 50) and the target. Runs name the copy
`spot-sets:DIR2` and refuse it for another model or tau. Deterministic; `--run-dir` keeps the
collected trajectories for a rerun with the same collection settings. A calibration set from a test
split, more than 50 prompts or a non-threshold rule is refused (exit 2).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.errors import UserError
from spotbench.commands import add_block_length_arguments, block_length_of


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="calibrate a SPOT-Sets checkpoint for another target and tau (train splits)"
    )
    parser.add_argument("proposer", help="spot-sets or spot-sets:DIR (the checkpoint to calibrate)")
    parser.add_argument("--model", required=True, help="target: a zoo model, tiny-random:<family> or a folder")
    parser.add_argument("--out", required=True, help="folder for the calibrated copy")
    parser.add_argument(
        "--tasks",
        default="arith:25,gsm8k:25",
        help="TASK[/SPLIT]:N,... at most 50 prompts in all; SPLIT train (default) or validation",
    )
    parser.add_argument("--rule", help="threshold:TAU (default: the rule the checkpoint was trained for)")
    parser.add_argument("--temperatures", default="0,1")
    add_block_length_arguments(parser)
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="prompt k decodes with seed + k")
    parser.add_argument(
        "--run-dir", help="keep the collected trajectories here; a rerun with the same collection settings reuses them"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from harness.targets.registry import check_lengths_for, load_dlm_target, target_kind
    from proposers.registry import PROPOSERS, parse_proposer
    from proposers.spot_sets.calibration import MAX_PROMPTS, Request, calibrate, check_request
    from proposers.spot_sets.family import spot_sets_folder
    from spotbench.commands.calibrate_spiffy import calibration_set, load_prompts, temperatures

    torch.set_num_threads(1)
    family, argument = parse_proposer(args.proposer)
    if family is not PROPOSERS["spot-sets"]:
        raise UserError(
            f"spotbench calibrate calibrates spot-sets checkpoints, not {args.proposer!r} "
            "(Spiffy graphs: spotbench calibrate-spiffy)"
        )
    folder = spot_sets_folder(argument)
    rule = check_request(folder, args.rule, Path(args.out))
    sources = calibration_set(args.tasks)
    if sum(count for _, _, count in sources) > MAX_PROMPTS:
        raise UserError(f"--tasks {args.tasks}: at most {MAX_PROMPTS} calibration prompts in all")
    temps = temperatures(args.temperatures)
    if args.seed < 0:
        raise UserError("--seed must be >= 0")
    if target_kind(args.model) != "dlm":
        raise UserError(f"model {args.model!r} is autoregressive; SPOT-Sets drafts for diffusion targets")
    block_length = block_length_of(args, args.model)
    check_lengths_for(args.model, args.gen_length, block_length)
    target = load_dlm_target(args.model, what="SPOT-Sets")
    names, prompts = load_prompts(sources, target)
    request = Request(
        args.proposer, folder, Path(args.out), rule, names, prompts, temps, args.gen_length, block_length, args.seed
    )
    record = calibrate(request, target, args.model, Path(args.run_dir) if args.run_dir else None)
    print(json.dumps({"calibration": record["calibration"], "fit": record["fit"]}))
    return 0

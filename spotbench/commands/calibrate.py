"""`spotbench calibrate spot-sets[:DIR] --model M --out DIR2`: fit a SPOT-Sets checkpoint to another target.

A SPOT-Sets checkpoint ranks positions on any target (its inputs are relative), but how probable a
commit is depends on the target: how often a confidence just under tau crosses it after one commit,
how sure the argmax is. Calibration keeps the network and fits three numbers on the target's own
plain threshold trajectories (zero-shot prompts, train splits only, at most 50; prompt k decodes
with seed + k at every temperature): a scale and bias of the commit logits and a temperature of the
argmax distribution (`proposers.spot_sets.network.Calibration`, by L-BFGS on the argmax and commit NLL).
DIR2 gets a copy of the checkpoint and `calibration.json` (the values, the NLL and accuracies
before and after, provenance: target, rule and tau, prompts, seed, source checkpoint, git revision).
Runs name it `spot-sets:DIR2` and refuse it for another model or tau. Deterministic; `--run-dir`
keeps the collected trajectories for a rerun with the same collection settings. A calibration set
from a test split, more than 50 prompts or a non-threshold rule is refused (exit 2).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.errors import UserError
from spotbench.commands import add_block_length_arguments, block_length_of

MAX_PROMPTS = 50
"""A light calibration: three numbers need few examples (a prompt yields about 250), and a cap keeps
it a calibration, not a second training run on the other target."""


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
        help=f"TASK[/SPLIT]:N,... at most {MAX_PROMPTS} prompts in all; SPLIT train (default) or validation",
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


@dataclass(frozen=True)
class Settings:
    """What the collection reads (`proposers.spot_sets.collection.Collecting`)."""

    target: str
    rule: str
    gen_length: int
    block_length: int
    seed: int
    max_depth: int
    max_age: int


def run(args: argparse.Namespace) -> int:
    import shutil

    import torch

    from harness.targets.registry import check_lengths_for, load_dlm_target, target_kind
    from harness.training.loop import save_state
    from harness.versions import git_revision
    from proposers.registry import PROPOSERS, parse_proposer
    from proposers.spot.collection import DATA_FILE
    from proposers.spot_sets.collection import SetViews, collect_all
    from proposers.spot_sets.family import spot_sets_folder
    from proposers.spot_sets.network import (
        CALIBRATION_FILE,
        CONFIG_FILE,
        WEIGHTS_FILE,
        load_spot_sets,
        read_meta,
        threshold_tau,
    )
    from proposers.spot_sets.training import evaluate, fit_calibration
    from spotbench.commands.calibrate_spiffy import calibration_set, load_prompts, temperatures

    torch.set_num_threads(1)
    family, argument = parse_proposer(args.proposer)
    if family is not PROPOSERS["spot-sets"]:
        raise UserError(
            f"spotbench calibrate calibrates spot-sets checkpoints, not {args.proposer!r} "
            "(Spiffy graphs: spotbench calibrate-spiffy)"
        )
    folder = spot_sets_folder(argument)
    meta = read_meta(folder)
    rule = args.rule or meta["provenance"]["rule"]
    tau = threshold_tau(rule)
    if tau is None:
        raise UserError(f"--rule {rule}: SPOT-Sets is calibrated for a threshold rule, threshold:TAU, TAU in (0, 1]")
    sources = calibration_set(args.tasks)
    if sum(count for _, _, count in sources) > MAX_PROMPTS:
        raise UserError(f"--tasks {args.tasks}: at most {MAX_PROMPTS} calibration prompts in all")
    temps = temperatures(args.temperatures)
    if args.seed < 0:
        raise UserError("--seed must be >= 0")
    out = Path(args.out)
    if out.resolve() == folder:
        raise UserError(f"--out {out} is the checkpoint itself; calibrate into a new folder (it gets a copy)")
    if target_kind(args.model) != "dlm":
        raise UserError(f"model {args.model!r} is autoregressive; SPOT-Sets drafts for diffusion targets")
    args.block_length = block_length_of(args, args.model)
    check_lengths_for(args.model, args.gen_length, args.block_length)
    target = load_dlm_target(args.model, what="SPOT-Sets")
    names, prompts = load_prompts(sources, target)
    jobs = [(name, ids, t) for name, ids in zip(names, prompts) for t in temps]
    settings = Settings(
        args.model,
        rule,
        args.gen_length,
        args.block_length,
        args.seed,
        meta["config"]["max_depth"],
        meta["config"]["max_age"],
    )
    collection = asdict(settings) | {"prompts": names, "temperatures": temps}
    cache = Path(args.run_dir) / DATA_FILE if args.run_dir else None
    saved = torch.load(cache, weights_only=False) if cache is not None and cache.exists() else None
    if saved is not None and saved["collection"] != collection:
        raise UserError(
            f"{cache} was collected with other settings (model, rule, prompts, temperatures, lengths, "
            "seed); use a new --run-dir"
        )
    parts = saved["parts"] if saved is not None else collect_all(settings, target, jobs)[0]
    if cache is not None and saved is None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        save_state(cache, {"collection": collection, "parts": parts})
    data = SetViews.cat(parts)
    net = load_spot_sets(folder)
    calibration = fit_calibration(net, data, tau)
    record = {
        "calibration": asdict(calibration),
        "fit": {
            "examples": data["argmax"].numel(),
            "before": evaluate(net, data, tau),
            "after": evaluate(net, data, tau, calibration),
        },
        "provenance": {
            "target": args.model,
            "family": target.family.name,
            "rule": rule,
            "tau": tau,
            "block_length": args.block_length,
            "gen_length": args.gen_length,
            "temperatures": temps,
            "seed": args.seed,
            "prompts": names,
            "checkpoint": args.proposer,
            "checkpoint_provenance": meta["provenance"],
            "git_revision": git_revision(),
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        shutil.copyfile(folder / name, out / name)
    (out / CALIBRATION_FILE).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({"calibration": record["calibration"], "fit": record["fit"]}))
    return 0

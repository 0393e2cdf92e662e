"""`spotbench calibrate-spiffy`: count a target's commit patterns into a Spiffy draft graph.

Each calibration prompt (zero-shot, train splits only) is decoded plainly with its logits kept, once
per temperature (prompt k with seed + k); `proposers.spiffy.draft_graph.calibrate` names every commit by its
(position rank, token rank) on the stale view and keeps the --nodes most frequent patterns as the
graph. The folder gets `spiffy.json`: the graphs and their provenance (target, block and generation
length, rule, temperatures, prompts, seed, git revision); runs name it `spiffy:DIR` and refuse it for
another model or block length. Deterministic. A calibration set drawn from a test split is refused
(exit 2): a baseline tuned on the prompts it is measured on would flatter itself.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UserError
from spotbench.commands import add_block_length_arguments, block_length_of

if TYPE_CHECKING:
    from harness.targets.target import DLMTarget

CALIBRATION_SPLITS = ("train", "validation")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate-spiffy", help="calibrate a Spiffy draft graph on a target's plain trajectories (train splits)"
    )
    parser.add_argument("--model", required=True, help="target: a zoo model, tiny-random:<family> or a folder")
    parser.add_argument("--out", required=True, help="calibration folder (spiffy.json)")
    parser.add_argument(
        "--tasks",
        default="gsm8k:25,mbpp:25",
        help="TASK[/SPLIT]:N,... the first N prompts of each; SPLIT is train (default) or validation",
    )
    parser.add_argument("--rule", default="top1", help="top1 or threshold:TAU")
    parser.add_argument("--temperatures", default="0,1", help="one graph per temperature")
    add_block_length_arguments(parser)
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=32, help="graph size D; a run prunes it to its budget")
    parser.add_argument("--seed", type=int, default=0, help="prompt k decodes with seed + k")
    parser.set_defaults(func=run)


def calibration_set(text: str) -> list[tuple[str, str, int]]:
    """(task, split, count) per comma-separated TASK[/SPLIT]:N; UserError for a test split or a bad item."""
    from tasks.registry import get_task

    items = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        source, _, count = item.rpartition(":")
        name, _, split = source.partition("/")
        split = split or "train"
        if not source or not count.isdigit() or int(count) < 1:
            raise UserError(f"--tasks {item!r}: expected TASK[/SPLIT]:N with N >= 1, e.g. gsm8k:25")
        task = get_task(name)
        usable = ", ".join(s for s in task.splits if s in CALIBRATION_SPLITS) or "none"
        if split == "test":
            raise UserError(
                f"--tasks {item}: calibration prompts must not come from a test split "
                f"(splits of {name} to calibrate on: {usable})"
            )
        if split not in CALIBRATION_SPLITS or split not in task.splits:
            raise UserError(f"--tasks {item}: task {name!r} has no calibration split {split!r} (usable: {usable})")
        items.append((name, split, int(count)))
    if not items:
        raise UserError("--tasks names no calibration prompts; e.g. gsm8k:25,mbpp:25")
    return items


def temperatures(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"--temperatures must be comma-separated numbers, got {text!r}") from None
    if not values or len(set(values)) != len(values) or not all(math.isfinite(t) and t >= 0 for t in values):
        raise UserError(f"--temperatures must list distinct finite numbers >= 0, got {text!r}")
    return values


def load_prompts(sources: list[tuple[str, str, int]], target: DLMTarget) -> tuple[list[str], list[list[int]]]:
    """The calibration prompts (zero-shot, in the target's tokens) and their names, `task/split/index`,
    which provenance records."""
    from tasks.base import prompt_ids
    from tasks.registry import get_task

    if target.tokenizer is None:
        raise UserError(f"target {target.name!r} has no tokenizer to encode task prompts")
    names, prompts = [], []
    for name, split, count in sources:
        task = get_task(name, num_fewshot=0)
        samples = task.load(split, limit=count)
        names += [f"{name}/{split}/{i}" for i in range(len(samples))]
        prompts += [prompt_ids(task, sample, target.tokenizer) for sample in samples]
    return names, prompts


def run(args: argparse.Namespace) -> int:
    import torch

    from harness.decoding import parse_rule
    from harness.targets.families import FAMILIES
    from harness.targets.registry import check_lengths_for, load_dlm_target
    from harness.versions import git_revision
    from proposers.spiffy.draft_graph import SpiffyCalibration, calibrate

    torch.set_num_threads(1)
    sources = calibration_set(args.tasks)
    temps = temperatures(args.temperatures)
    parse_rule(args.rule, next(iter(FAMILIES.values())), 0)  # a bad rule fails before the model loads
    args.block_length = block_length_of(args, args.model)
    check_lengths_for(args.model, args.gen_length, args.block_length)
    if args.nodes < 1 or args.seed < 0:
        raise UserError("--nodes must be >= 1 and --seed >= 0")
    target = load_dlm_target(args.model, what="Spiffy")
    names, prompts = load_prompts(sources, target)
    rule = parse_rule(args.rule, target.family, target.mask_id)
    graphs = calibrate(target, prompts, rule, temps, args.gen_length, args.block_length, args.nodes, args.seed)
    provenance = {
        "target": args.model,
        "family": target.family.name,
        "block_length": args.block_length,
        "gen_length": args.gen_length,
        "rule": args.rule,
        "temperatures": temps,
        "nodes": args.nodes,
        "seed": args.seed,
        "prompts": names,
        "git_revision": git_revision(),
    }
    SpiffyCalibration(provenance, graphs).save(Path(args.out))
    print(
        json.dumps(
            {
                f"{t:g}": {"roots": g.roots, "top": [[list(e) for e in p] for p in g.patterns[:4]]}
                for t, g in graphs.items()
            }
        )
    )
    return 0

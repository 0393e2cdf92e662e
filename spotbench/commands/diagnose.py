"""`spotbench diagnose`: how much room a target leaves for speculative decoding, on a task.

For any target (a zoo model or a real checkpoint) it runs a task's prompts through the arm pipeline
in this process (no Ray, no run directory) with one proposer at one budget, and prints that arm's
summary row: the stale-token hit rate (how often a committed token equals the previous pass's greedy
token there: SPOT's premise, >90% on real models), target passes per generated token, task accuracy,
mean acceptance length, exactness and why passes stopped, with a few sample outputs. The same
columns are in every run's summary.
"""

from __future__ import annotations

import argparse
import json

from spotbench.commands import add_block_length_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose", help="stale-token hit rate, passes per token, accuracy and acceptance of a target"
    )
    parser.add_argument("--model", default="sdar-a", help="zoo name, tiny-random:<family> or a folder")
    parser.add_argument("--task", default="arith", help="task name (spotbench tasks list)")
    parser.add_argument("--split", default="test")
    # numbers stay text here: the suite's field validators check them, as they check a suite file
    parser.add_argument("--limit", default="20", help="number of prompts")
    parser.add_argument("--fewshot", help="override the task's number of few-shot examples")
    parser.add_argument("--gen-length", default="128")
    add_block_length_arguments(parser)
    parser.add_argument("--rule", default="top1")
    parser.add_argument("--temperature", default="0")
    parser.add_argument("--seed", default="0")
    parser.add_argument("--batch-size", help="prompts decoded together (default 8, as run's)")
    parser.add_argument("--proposer", default="confidence")
    parser.add_argument("--budget", default="8")
    parser.add_argument("--samples", default="3", help="sample outputs to show")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--device", help="auto (default: a GPU when visible, else the CPU), cpu, cuda, cuda:N")
    parser.add_argument(
        "--dtype", help="auto (default: bf16 on a GPU, float32 on a CPU), bfloat16, float16, float32, float64"
    )
    parser.set_defaults(func=run)


FLAGS = {
    "models": "--model",
    "proposers": "--proposer",
    "tasks": "--task",
    "split": "--split",
    "limit": "--limit",
    "temperatures": "--temperature",
    "rules": "--rule",
    "budgets": "--budget",
    "seeds": "--seed",
    "gen_length": "--gen-length",
    "block_length": "--block-length",
    "num_fewshot": "--fewshot",
    "batch_sizes": "--batch-size",
}
"""This command's flag for each suite setting, for messages."""


def run(args: argparse.Namespace) -> int:
    import dataclasses

    import pyarrow as pa

    from cluster.suite import build_suite, check_storable
    from cluster.unit_decoder import Unit, UnitDecoder
    from harness.errors import UserError
    from harness.runs.schema import ROW_SCHEMA
    from harness.runs.summary import summarize
    from harness.validation import NonNegativeInt, check_value

    # one value each: a list of one, so that a comma is not read as a second value
    flags = {
        "models": [args.model],
        "proposers": [args.proposer],
        "tasks": [args.task],
        "split": args.split,
        "limit": args.limit,
        "temperatures": [args.temperature],
        "rules": [args.rule],
        "budgets": [args.budget],
        "seeds": [args.seed],
        "gen_length": args.gen_length,
        "block_length": args.block_length,
        "untrained_block_length": args.untrained_block_length,
        "num_fewshot": args.fewshot,
        "device": args.device,
        "batch_sizes": None if args.batch_size is None else [args.batch_size],
        "dtype": args.dtype,
    }
    # without --fewshot each task keeps its own default, unlike a run (zero-shot zoo models)
    suite = build_suite({"num_fewshot": None}, flags, FLAGS)
    check_storable(suite)  # its rows go through the results' Arrow schema
    shown = check_value(NonNegativeInt, args.samples, "--samples")
    unit_decoder = UnitDecoder(suite)
    task = unit_decoder.task(args.task)
    if suite.num_fewshot and not hasattr(task, "num_fewshot"):
        raise UserError(f"task {args.task!r} is zero-shot only; drop --fewshot")
    samples = task.load(suite.split, limit=suite.limit)
    unit = Unit(args.model, args.task, tuple(samples), tuple(suite.groups(args.model)))
    rows = [dataclasses.asdict(row) for group in unit_decoder.decode(unit) for row in group]
    [summary] = summarize(pa.Table.from_pylist(rows, schema=ROW_SCHEMA)).to_pylist()
    report = summary | {
        "samples": [
            {"question": sample.question, "output": row["completion"], "correct": row["correct"]}
            for sample, row in list(zip(samples, rows))[:shown]
        ]
    }
    if args.json:
        print(json.dumps(report))
        return 0
    for key, value in summary.items():
        print(f"{key:<22} {value:.3f}" if isinstance(value, float) else f"{key:<22} {value}")
    for index, sample in enumerate(report["samples"]):
        print(
            f"\n--- sample {index} ({'correct' if sample['correct'] else 'wrong'})\n"
            f"Q: {sample['question']}\nA: {sample['output']}"
        )
    return 0

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


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose", help="stale-token hit rate, passes per token, accuracy and acceptance of a target"
    )
    parser.add_argument("--model", default="sdar-a", help="zoo name, tiny-random:<family> or a folder")
    parser.add_argument("--task", default="arith", help="task name (spotbench tasks list)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=20, help="number of prompts")
    parser.add_argument("--fewshot", type=int, help="override the task's number of few-shot examples")
    parser.add_argument("--gen-length", type=int, default=128)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--rule", default="top1")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--proposer", default="confidence")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--samples", type=int, default=3, help="sample outputs to show")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    import pyarrow as pa

    from cluster.evaluate import Evaluator, Unit
    from cluster.suite import build_suite
    from harness.errors import UserError
    from harness.results import ROW_SCHEMA
    from harness.summary import summarize

    suite = build_suite({"num_fewshot": args.fewshot}, {
        "models": [args.model], "proposers": [args.proposer], "tasks": [args.task], "split": args.split,
        "limit": args.limit, "temperatures": [args.temperature], "rules": [args.rule], "budgets": [args.budget],
        "seeds": [args.seed], "gen_length": args.gen_length, "block_length": args.block_length})
    evaluator = Evaluator(suite)
    task = evaluator.task(args.task)
    if args.fewshot and not hasattr(task, "num_fewshot"):
        raise UserError(f"task {args.task!r} is zero-shot only; drop --fewshot")
    samples = task.load(args.split, limit=args.limit)
    rows = [dataclasses.asdict(row) for sample in samples
            for group in evaluator.evaluate(Unit(args.model, args.task, sample, suite.groups())) for row in group]
    [summary] = summarize(pa.Table.from_pylist(rows, schema=ROW_SCHEMA)).to_pylist()
    report = summary | {"samples": [
        {"question": sample.question, "output": row["completion"], "correct": row["correct"]}
        for sample, row in list(zip(samples, rows))[: args.samples]]}
    if args.json:
        print(json.dumps(report))
        return 0
    for key, value in summary.items():
        print(f"{key:<22} {value:.3f}" if isinstance(value, float) else f"{key:<22} {value}")
    for index, sample in enumerate(report["samples"]):
        print(f"\n--- sample {index} ({'correct' if sample['correct'] else 'wrong'})\n"
              f"Q: {sample['question']}\nA: {sample['output']}")
    return 0

"""`spotbench diagnose`: how much room a target leaves for speculative decoding, on a task.

For any target (a zoo model or a real checkpoint) it decodes a task's prompts plainly and reports the
stale-token hit rate (how often a committed token equals the previous pass's greedy token there:
SPOT's premise, >90% on real models), target passes per generated token, task accuracy, and one
proposer's mean acceptance length at a budget, with a few sample outputs. Every speculative run is
checked against the plain one.
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
    from harness.decoding import DecodeConfig, parse_rule, plain_decode, speculative_decode
    from harness.errors import UserError
    from harness.lossless import check_lossless, near_tie_tolerance
    from harness.targets.registry import load_target
    from proposers import build_proposer
    from tasks.base import prompt_ids
    from tasks.registry import get_task

    if args.limit <= 0:
        raise UserError(f"--limit must be positive, got {args.limit}")
    task = get_task(args.task, args.fewshot)
    if args.fewshot and not hasattr(task, "num_fewshot"):
        raise UserError(f"task {args.task!r} is zero-shot only; drop --fewshot")
    if args.split not in task.splits:
        raise UserError(f"task {args.task!r} has no split {args.split!r}; splits: {', '.join(task.splits)}")
    samples = task.load(args.split, limit=args.limit)
    target = load_target(args.model)
    rule = parse_rule(args.rule, target.family, target.mask_id)
    config = DecodeConfig(rule, args.gen_length, args.block_length, args.temperature, args.seed)
    tolerance = near_tie_tolerance(target.dtype)
    hits = commits = plain_nfe = spec_nfe = spec_commits = tokens = exact = 0
    completions = []
    for sample in samples:
        ids = prompt_ids(task, sample, target.tokenizer)
        plain = plain_decode(target, ids, config)
        spec = speculative_decode(target, ids, build_proposer(args.proposer, target, plain), config, args.budget)
        exact += check_lossless(plain, spec, tolerance).exact
        hits, commits = hits + plain.metrics.stale_hits, commits + plain.metrics.stale_commits
        plain_nfe, spec_nfe = plain_nfe + plain.metrics.nfe, spec_nfe + spec.metrics.nfe
        spec_commits += spec.metrics.commits
        tokens += len(plain.answer_ids)
        completions.append(target.tokenizer.decode(plain.answer_ids))
    scores = task.score(samples, completions)
    report = {
        "model": target.name,
        "task": args.task,
        "prompts": len(samples),
        "temperature": args.temperature,
        "stale_hit_rate": hits / commits if commits else None,
        "plain_nfe_per_token": plain_nfe / max(1, tokens),
        "accuracy": sum(bool(s["correct"]) for s in scores) / len(scores),
        "proposer": args.proposer,
        "budget": args.budget,
        "mean_accept_len": spec_commits / spec_nfe,
        "speedup_nfe": plain_nfe / spec_nfe,
        "exact_rate": exact / len(samples),
        "samples": [
            {"question": s.question, "output": c, "correct": bool(r["correct"])}
            for s, c, r in list(zip(samples, completions, scores))[: args.samples]
        ],
    }
    if args.json:
        print(json.dumps(report))
        return 0
    for key, value in report.items():
        if key != "samples":
            print(f"{key:<20} {value:.3f}" if isinstance(value, float) else f"{key:<20} {value}")
    for index, sample in enumerate(report["samples"]):
        print(f"\n--- sample {index} ({'correct' if sample['correct'] else 'wrong'})\n"
              f"Q: {sample['question']}\nA: {sample['output']}")
    return 0

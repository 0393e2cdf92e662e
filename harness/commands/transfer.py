"""`spotbench transfer`: one SPOT checkpoint on several targets, without retraining, beside the
training-free confidence proposers and the oracle.

Per eval target and temperature every prompt is decoded plainly once; each (proposer, budget) arm is
decoded speculatively and checked against it (near-tie tolerance of the target's dtype). One row per
(train_target, eval_target, proposer, task, temperature, budget): `speedup_nfe` = plain nfe / spec nfe
summed over prompts, `exact_rate`, `mean_accept_len` and `oracle_fraction` (speedup over the oracle's
at the same budget). `train_target` is the checkpoint's training target for SPOT, null otherwise.
"""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transfer", help="a SPOT checkpoint on several targets beside confidence and oracle"
    )
    parser.add_argument("--proposer-checkpoint", required=True, help="SPOT checkpoint folder")
    parser.add_argument("--targets", default="sdar-a,llada-a,dream-a,sdar-b")
    parser.add_argument("--task", default="arith")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--budgets", default="4,8,16")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--baselines", default="oracle,confidence,confidence-branch")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="sample i decodes with seed + i")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from harness.decoding import DecodeConfig, parse_rule, plain_decode, speculative_decode
    from harness.errors import UserError
    from harness.lossless import check_lossless, near_tie_tolerance
    from harness.targets.registry import load_target
    from proposers import build_proposer
    from proposers.spot import CONFIG_FILE, SpotProposer, load_spot
    from tasks.base import prompt_ids
    from tasks.registry import get_task

    folder = Path(args.proposer_checkpoint)
    if not (folder / CONFIG_FILE).exists():
        raise UserError(f"no SPOT checkpoint in {folder} (expected {CONFIG_FILE})")
    if args.limit <= 0:
        raise UserError(f"--limit must be positive, got {args.limit}")
    net = load_spot(folder)
    train_target = json.loads((folder / CONFIG_FILE).read_text()).get("provenance", {}).get("target")
    budgets = [int(b) for b in args.budgets.split(",")]
    temperatures = [float(t) for t in args.temperatures.split(",")]
    arms = [*args.baselines.split(","), "spot"]
    task = get_task(args.task, num_fewshot=0)
    samples = task.load(args.split, limit=args.limit)
    rows = []
    for name in args.targets.split(","):
        target = load_target(name)
        rule = parse_rule("top1", target.family, target.mask_id)
        tolerance = near_tie_tolerance(target.dtype)
        prompts = [prompt_ids(task, s, target.tokenizer) for s in samples]
        for temperature in temperatures:
            totals = {(arm, b): [0, 0, 0, 0] for arm in arms for b in budgets}  # plain, spec, exact, commits
            for index, ids in enumerate(prompts):
                config = DecodeConfig(rule, args.gen_length, args.block_length, temperature, args.seed + index)
                with torch.no_grad():
                    plain = plain_decode(target, ids, config)
                    for arm in arms:
                        for budget in budgets:
                            proposer = SpotProposer(net) if arm == "spot" else build_proposer(arm, target, plain)
                            spec = speculative_decode(target, ids, proposer, config, budget)
                            total = totals[arm, budget]
                            total[0] += plain.metrics.nfe
                            total[1] += spec.metrics.nfe
                            total[2] += check_lossless(plain, spec, tolerance).exact
                            total[3] += spec.metrics.commits
            for (arm, budget), (plain_nfe, spec_nfe, exact, commits) in totals.items():
                oracle = totals.get(("oracle", budget))
                oracle_speedup = oracle[0] / oracle[1] if oracle else None
                rows.append({
                    "train_target": train_target if arm == "spot" else None, "eval_target": name,
                    "proposer": arm, "task": args.task, "split": args.split, "temperature": temperature,
                    "budget": budget, "prompts": len(prompts), "speedup_nfe": plain_nfe / spec_nfe,
                    "mean_accept_len": commits / spec_nfe, "exact_rate": exact / len(prompts),
                    "oracle_fraction": plain_nfe / spec_nfe / oracle_speedup if oracle_speedup else None,
                })
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['eval_target']:<10} T={row['temperature']:<4g} b={row['budget']:<3} {row['proposer']:<18} "
                  f"speedup_nfe {row['speedup_nfe']:.3f}  exact {row['exact_rate']:.2f}"
                  + (f"  of oracle {row['oracle_fraction']:.2f}" if row["oracle_fraction"] else ""))
    return 0

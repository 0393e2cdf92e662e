"""Decoding engine overhead and speculative speedups on a tiny target (a script, not a test).

1. Engine overhead: the speculative loop at budget 0 does exactly the plain decoder's passes, so its
   wall time over the plain decoder's is the price of the machinery (proposer call, tree preparation,
   walk). The plain decoder also records per-step forensics for the lossless check; the second ratio
   is against a plain decoder with that recording stubbed out (benchmark only), the stricter one.
   Wall times are the minimum over repetitions (the machine is shared), arms interleaved.
2. Speedups: speedup_nfe and mean_accept_len of each proposer at budgets 4, 8 and 16, at T=0 and T=1.

    python benchmarks/decoding_overhead.py [--model tiny-random:llada] [--reps 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from harness.decoding import DecodeConfig, Rule, parse_rule, plain_decode, speculative_decode
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.registry import load_target
from proposers import build_proposer

PROMPTS = [
    "Question: what is 12 times 7?\nAnswer:",
    "Write a haiku about the sea.",
    "def fibonacci(n):",
    "The capital of France is",
]


def timed(decode) -> float:
    start = time.perf_counter()
    decode()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random:llada")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=16)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: steadier on a shared machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model)
    prompts = [target.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]
    rule = parse_rule("top1", target.family, target.mask_id)
    print(f"target {target.name}, {target.dtype}, gen {args.gen_length}, block {args.block_length}, "
          f"rule {rule}, {len(prompts)} prompts, min wall over {args.reps} reps, {args.threads} thread(s)\n")

    print("engine overhead (wall of all prompts, seconds)")
    print(f"{'T':>4} {'plain':>8} {'plain-nf':>9} {'spec@0':>8} {'spec@0/plain':>13} {'spec@0/plain-nf':>16} "
          f"{'us/pass vs plain-nf':>20}")
    explain = Rule.explain
    for temperature in (0.0, 1.0):
        config = DecodeConfig(rule, args.gen_length, args.block_length, temperature, 0)
        references = [plain_decode(target, ids, config) for ids in prompts]
        passes = sum(r.metrics.nfe for r in references)
        walls = {"plain": 0.0, "plain-nf": 0.0, "spec@0": 0.0}
        for ids, reference in zip(prompts, references):
            proposer = build_proposer("confidence", target, reference)
            best = {arm: float("inf") for arm in walls}
            for _ in range(args.reps):  # interleaved, so load changes hit every arm alike
                best["plain"] = min(best["plain"], timed(lambda: plain_decode(target, ids, config)))
                Rule.explain = lambda self, *a: (self(*a), None)  # plain without forensics
                best["plain-nf"] = min(best["plain-nf"], timed(lambda: plain_decode(target, ids, config)))
                Rule.explain = explain
                spec = timed(lambda: speculative_decode(target, ids, proposer, config, 0))
                best["spec@0"] = min(best["spec@0"], spec)
            for arm in walls:
                walls[arm] += best[arm]
        print(f"{temperature:>4} {walls['plain']:>8.3f} {walls['plain-nf']:>9.3f} {walls['spec@0']:>8.3f} "
              f"{walls['spec@0'] / walls['plain']:>12.3f}x {walls['spec@0'] / walls['plain-nf']:>15.3f}x "
              f"{(walls['spec@0'] - walls['plain-nf']) / passes * 1e6:>20.1f}")

    print("\nspeculative speedups (sums over prompts)")
    print(f"{'proposer':<18} {'budget':>6} {'T':>4} {'speedup_nfe':>11} {'mean_accept':>11} {'rows/pass':>9} "
          f"{'speedup_wall':>12} {'exact':>6}")
    for temperature in (0.0, 1.0):
        config = DecodeConfig(rule, args.gen_length, args.block_length, temperature, 0)
        references = [plain_decode(target, ids, config) for ids in prompts]
        for name in ("oracle", "confidence", "confidence-branch"):
            for budget in (4, 8, 16):
                runs = [speculative_decode(target, ids, build_proposer(name, target, ref), config, budget)
                        for ids, ref in zip(prompts, references)]
                plain_nfe = sum(r.metrics.nfe for r in references)
                nfe = sum(r.metrics.nfe for r in runs)
                commits = sum(r.metrics.commits for r in runs)
                rows = sum(r.metrics.rows for r in runs)
                wall = sum(r.metrics.wall_s for r in runs) / sum(r.metrics.wall_s for r in references)
                exact = sum(check_lossless(ref, r, near_tie_tolerance(target.dtype)).exact
                            for ref, r in zip(references, runs))
                print(f"{name:<18} {budget:>6} {temperature:>4} {plain_nfe / nfe:>10.2f}x "
                      f"{commits / nfe:>11.2f} "
                      f"{rows / nfe:>9.1f} {1 / wall:>11.2f}x {exact:>3}/{len(runs)}")


if __name__ == "__main__":
    main()

"""Plain decoding's engine time and speculative speedups on one target (a script, not a test).

1. Engine share: plain decoding (the traced reference every arm is checked against) splits its wall
   time into the target's passes and the engine (rules, noise, forensics, bookkeeping: everything
   else, DESIGN.md section 3). Printed per pass and as a share of wall, at T=0 and T=1, for the
   decoding core of this checkout and, with `--before REV`, the decoding core (noise, rules, block
   loop) of git revision REV run on the same target in the same process, the two interleaved
   prompt by prompt so that the machine's load hits both alike; both must produce the same tokens.
   Times are sums of per-prompt medians over `--reps` repetitions; `engine/pass` is in microseconds.
   Clocks: `cpu` (default) is the decoding thread's CPU time (torch runs on that thread with
   `--threads 1`), which other jobs on a shared machine disturb far less than wall time; `wall` is
   what `Metrics` measures in a run. The loop's timer is switched to the chosen clock.
2. Speedups: speedup_nfe and mean_accept_len of each proposer at budgets 4, 8 and 16, at T=0 and T=1.

    python benchmarks/decoding_overhead.py [--model sdar-a] [--reps 5] [--threads 1] [--before REV]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch

from harness.decoding import DecodeConfig, Generation, parse_rule, plain_decode, speculative_decode
from harness.decoding.tree import Proposer
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.registry import load_dlm_target
from proposers import build_proposer

PROMPTS = [
    "Question: what is 12 times 7?\nAnswer:",
    "Write a haiku about the sea.",
    "def fibonacci(n):",
    "The capital of France is",
]
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
CORE = ("noise", "rules", "speculative")
"""The modules of the decoding core that `--before` loads from another revision, in import order."""


def timed_by(clock: Callable[[], float], speculative: types.ModuleType) -> Callable:
    """The loop module's `plain_decode`, its timer switched to `clock` (a benchmark-only patch)."""
    vars(speculative)["time"] = types.SimpleNamespace(perf_counter=clock)
    return speculative.plain_decode


def core_at(revision: str) -> types.ModuleType:
    """The block loop module of the decoding core at `revision`: its noise, rules and loop modules,
    compiled apart, with everything else (target, tree, metrics) from this checkout."""
    root = Path(__file__).resolve().parents[1]
    loaded: dict[str, types.ModuleType] = {}
    saved = {name: sys.modules[f"harness.decoding.{name}"] for name in CORE}
    try:
        for name in CORE:
            source = subprocess.run(
                ["git", "show", f"{revision}:harness/decoding/{name}.py"],
                cwd=root,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            module = types.ModuleType(f"harness.decoding.{name}")
            sys.modules[f"harness.decoding.{name}"] = module  # later modules import this revision's
            exec(compile(source, f"{revision}:harness/decoding/{name}.py", "exec"), module.__dict__)
            loaded[name] = module
    finally:
        sys.modules.update({f"harness.decoding.{name}": module for name, module in saved.items()})
    return loaded["speculative"]


def split(generation: Generation) -> tuple[float, float]:
    """(wall, target) seconds of one generation (plain decoding has no proposer time)."""
    return generation.metrics.wall_s, generation.metrics.target_s


def engine_table(target, prompts: list[list[int]], rule, args, cores: dict[str, Callable]) -> None:
    print("plain decoding: target and engine per pass (sums of per-prompt medians)")
    print(
        f"{'T':>4} {'core':<14} {'passes':>6} {'wall/pass ms':>12} {'target/pass ms':>14} "
        f"{'engine/pass us':>14} {'engine share':>12}"
    )
    for temperature in (0.0, 1.0):
        config = DecodeConfig(rule, args.gen_length, args.block_length, temperature, 0)
        totals = {name: [0.0, 0.0, 0] for name in cores}
        for ids in prompts:
            tokens = {name: decode(target, ids, config).tokens for name, decode in cores.items()}
            if any(not torch.equal(t, tokens["this checkout"]) for t in tokens.values()):
                raise SystemExit(f"the cores decode different tokens for prompt {ids[:8]}...")
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cores}
            passes = {}
            for _ in range(args.reps):  # interleaved, so load changes hit every core alike
                for name, decode in cores.items():
                    generation = decode(target, ids, config)
                    samples[name].append(split(generation))
                    passes[name] = generation.metrics.nfe
            for name in cores:
                totals[name][0] += statistics.median(w for w, _ in samples[name])
                totals[name][1] += statistics.median(t for _, t in samples[name])
                totals[name][2] += passes[name]
        for name, (wall, target_s, count) in totals.items():
            print(
                f"{temperature:>4} {name:<14} {count:>6} {wall / count * 1e3:>12.2f} "
                f"{target_s / count * 1e3:>14.2f} {(wall - target_s) / count * 1e6:>14.0f} "
                f"{(wall - target_s) / wall:>11.1%}"
            )


def speedup_table(target, prompts: list[list[int]], rule, args) -> None:
    print("\nspeculative speedups (sums over prompts)")
    print(
        f"{'proposer':<18} {'budget':>6} {'T':>4} {'speedup_nfe':>11} {'mean_accept':>11} {'rows/pass':>9} "
        f"{'speedup_wall':>12} {'exact':>6}"
    )
    for temperature in (0.0, 1.0):
        config = DecodeConfig(rule, args.gen_length, args.block_length, temperature, 0)
        references = [plain_decode(target, ids, config) for ids in prompts]
        for name in ("oracle", "confidence", "confidence-branch"):
            for budget in (4, 8, 16):
                runs = [
                    speculative_decode(target, ids, cast(Proposer, build_proposer(name, target, ref)), config, budget)
                    for ids, ref in zip(prompts, references)
                ]
                plain_nfe = sum(r.metrics.nfe for r in references)
                nfe = sum(r.metrics.nfe for r in runs)
                commits = sum(r.metrics.commits for r in runs)
                rows = sum(r.metrics.rows for r in runs)
                wall = sum(r.metrics.wall_s for r in runs) / sum(r.metrics.wall_s for r in references)
                exact = sum(
                    check_lossless(ref, r, near_tie_tolerance(target.dtype)).exact for ref, r in zip(references, runs)
                )
                print(
                    f"{name:<18} {budget:>6} {temperature:>4} {plain_nfe / nfe:>10.2f}x "
                    f"{commits / nfe:>11.2f} "
                    f"{rows / nfe:>9.1f} {1 / wall:>11.2f}x {exact:>3}/{len(runs)}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sdar-a")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument(
        "--before", metavar="REV", help="also time the decoding core of this git revision, side by side"
    )
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--engine-only", action="store_true", help="skip the speedup table")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_dlm_target(args.model, what="this benchmark")
    prompts = [target.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]
    rule = parse_rule("top1", target.family, target.mask_id)
    print(
        f"target {target.name}, {target.dtype}, gen {args.gen_length}, block {args.block_length}, "
        f"rule {rule}, {len(prompts)} prompts, median over {args.reps} reps, {args.threads} thread(s), "
        f"{args.clock} clock\n"
    )
    clock = CLOCKS[args.clock]
    cores = {"this checkout": timed_by(clock, sys.modules["harness.decoding.speculative"])}
    if args.before:
        cores[args.before[:12]] = timed_by(clock, core_at(args.before))
    engine_table(target, prompts, rule, args, cores)
    if not args.engine_only:
        speedup_table(target, prompts, rule, args)


if __name__ == "__main__":
    main()

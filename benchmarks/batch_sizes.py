"""Throughput by batch size: plain tokens/s at each batch size and speculative speedup_wall against
plain decoding at the same batch size, with the target's pass cost by rows (a script, not a test).

All variants run side by side in this process on the same prompts: per repetition, each batch size
in turn decodes every prompt plain and with each proposer (`harness.decoding.batch.decode_batch`,
as a run's worker does); the table reports medians over repetitions, so load from other jobs hits
every variant alike. Every speculative generation is checked against the plain one of its prompt at
the same batch size (`exact` column: token-exact share; float32 batches may flip a near-tie).

The cost curve times one target pass over n rows: n rows of one prompt (a draft tree's rows) and
one row each of n prompts (a batch of plain passes), each over a cached arith prompt (a diffusion
target's block, an autoregressive target's next token).

    python benchmarks/batch_sizes.py [--targets sdar-a] [--proposers confidence,spot] [--budget 4]
        [--batch-sizes 1,4,8,16] [--prompts 16] [--temperatures 0] [--reps 2] [--threads 1]
        [--pass-costs-only]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from harness.decoding import decode_batch
from harness.lossless import check_lossless, near_tie_tolerance
from harness.pipeline import Group, decoder
from harness.targets.registry import load_target
from harness.targets.target import forward_sessions
from proposers import build_proposer
from tasks.base import prompt_ids
from tasks.chat import Chat
from tasks.registry import get_task

COST_ROWS = (1, 2, 4, 8, 16, 32)


def groups(target, name: str, count: int, temperature: float, gen_length: int, block_length: int) -> list[Group]:
    task = get_task("arith", 0)
    chat = Chat(target.tokenizer, None, None)
    rule = "greedy" if not hasattr(target, "family") else "top1"
    return [
        Group(
            name, "arith", s.sample_id, tuple(prompt_ids(task, s, chat)), temperature, rule, 0, gen_length, block_length
        )
        for s in task.load("test", limit=count)
    ]


def run_arm(target, loops, proposers, budget: int, batch_size: int):
    """(wall seconds, generations) of every prompt at `batch_size`; proposers None: plain decoding."""
    start = time.perf_counter()
    made = [loop(None, 0) if proposers is None else loop(p, budget) for loop, p in zip(loops, proposers or loops)]
    generations = decode_batch(target, made, batch_size)
    return time.perf_counter() - start, generations


def cost_curve(target, prompt: list[int], reps: int) -> list[tuple[int, float, float]]:
    """(rows, ms for n rows of one prompt, ms for one row of each of n prompts), medians."""
    out = []
    for rows in COST_ROWS:
        one, many = [], []
        for _ in range(reps):
            sessions = [target.start(prompt, 64, 32) for _ in range(rows)]
            for session in sessions:  # the prompt's blocks stored: a steady-state block pass follows
                session.forward(session.first_state()[None])
            states = sessions[0].first_state()[None]
            start = time.perf_counter()
            sessions[0].forward(states.expand(rows, -1))
            one.append(time.perf_counter() - start)
            start = time.perf_counter()
            forward_sessions([(s, states) for s in sessions])
            many.append(time.perf_counter() - start)
        out.append((rows, 1000 * statistics.median(one), 1000 * statistics.median(many)))
    return out


def ar_cost_curve(target, prompt: list[int], reps: int) -> list[tuple[int, float, float]]:
    """`cost_curve` for an autoregressive target: a chain of n - 1 draft nodes of one prompt, and the
    plain passes of n prompts, each over its cached prompt (never committed, so every repetition
    passes over the same caches)."""
    out = []
    for rows in COST_ROWS:
        sessions = [target.start(prompt[:-1]) for _ in range(rows)]
        for session in sessions:
            session.forward(torch.tensor([], dtype=torch.long), [])
            session.commit([], prompt[-1])
        chain, parents = torch.arange(100, 99 + rows), list(range(rows - 1))
        one, many = [], []
        for _ in range(reps):
            start = time.perf_counter()
            sessions[0].forward(chain, parents)
            one.append(time.perf_counter() - start)
            start = time.perf_counter()
            target.forward_many([(s, torch.tensor([], dtype=torch.long), []) for s in sessions])
            many.append(time.perf_counter() - start)
        out.append((rows, 1000 * statistics.median(one), 1000 * statistics.median(many)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sdar-a")
    parser.add_argument("--proposers", default="confidence,spot")
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--batch-sizes", default="1,4,8,16")
    parser.add_argument("--prompts", type=int, default=16, help="arith test prompts")
    parser.add_argument("--temperatures", default="0")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--pass-costs-only", action="store_true", help="only the pass cost by rows")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads (1: on a shared machine OpenMP spin-waits inflate timings)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    names = args.proposers.split(",") if args.proposers else []
    for model in args.targets.split(","):
        target = load_target(model)
        tolerance = near_tie_tolerance(target.dtype)
        temperatures = [] if args.pass_costs_only else [float(t) for t in args.temperatures.split(",")]
        for temperature in temperatures:
            members = groups(target, model, args.prompts, temperature, args.gen_length, args.block_length)
            loops = [decoder(target, g) for g in members]
            walls: dict[tuple, list[float]] = defaultdict(list)
            tokens: dict[int, int] = {}
            exact: defaultdict[tuple[str, int], list[bool]] = defaultdict(list)
            for rep in range(args.reps):
                for b in sizes if rep % 2 == 0 else reversed(sizes):  # alternate the order against drifting load
                    wall, plains = run_arm(target, loops, None, 0, b)
                    walls["plain", b].append(wall)
                    tokens[b] = sum(len(g.answer_ids) for g in plains)
                    for name in names:
                        built = [build_proposer(name, target, plain) for plain in plains]
                        wall, specs = run_arm(target, loops, built, args.budget, b)
                        walls[name, b].append(wall)
                        exact[name, b] += [check_lossless(p, s, tolerance).exact for p, s in zip(plains, specs)]
            print(
                f"\n{model}, T={temperature:g}, {args.prompts} arith prompts, gen {args.gen_length}, "
                f"budget {args.budget}, {args.threads} thread(s), median of {args.reps}"
            )
            header = (
                ["batch", "plain tok/s", "vs batch 1"]
                + [f"{n} speedup_wall" for n in names]
                + [f"{n} exact" for n in names]
            )
            lines = [header]
            base = tokens[sizes[0]] / statistics.median(walls["plain", sizes[0]])
            for b in sizes:
                plain = statistics.median(walls["plain", b])
                row = [str(b), f"{tokens[b] / plain:.1f}", f"{tokens[b] / plain / base:.2f}x"]
                row += [f"{plain / statistics.median(walls[n, b]):.2f}x" for n in names]
                row += [f"{sum(exact[n, b])}/{len(exact[n, b])}" for n in names]
                lines.append(row)
            widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
            print("\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines))
        curve = cost_curve if hasattr(target, "family") else ar_cost_curve
        print(f"\n{model} pass cost (ms): rows | n rows of one prompt | one row each of n prompts | ratio")
        prompt = list(groups(target, model, 1, 0.0, args.gen_length, args.block_length)[0].prompt_ids)
        for rows, one, many in curve(target, prompt, max(3, args.reps * 2)):
            print(f"{rows:>4} | {one:8.2f} | {many:8.2f} | {many / one:.2f}x")


if __name__ == "__main__":
    main()

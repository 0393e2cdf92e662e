"""The cost of one AR target forward by rows scored, over a cached GSM8K prompt (a script, not a test).

A speculative AR pass scores k rows (the root and k - 1 draft nodes, here a chain under the tree
mask) in one forward over the prompt's KV cache; plain decoding scores one. How the forward's wall
time grows with k decides which budgets can pay off in wall time: a pass that costs c(k) and commits
tau tokens beats plain decoding when tau / c(k) > 1 / c(1). Per k, the median over repetitions
(the machine is shared) of the forward alone, with the cache trimmed back after each.

    python benchmarks/ar_cost.py [--model smollm2] [--prompts 4] [--reps 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from harness.targets.ar import ARSession
from harness.targets.registry import load_ar_only
from tasks.base import prompt_ids
from tasks.registry import get_task

ROWS = (1, 4, 8, 16)


def forward_seconds(session: ARSession, rows: int, reps: int) -> float:
    """Median wall time of a forward of `rows` rows (root + a chain of rows - 1 nodes)."""
    nodes = torch.arange(100, 100 + rows - 1)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        session.forward(nodes, list(range(rows - 1)))
        times.append(time.perf_counter() - start)  # uncommitted: the next pass is over the same cache
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--prompts", type=int, default=4, help="GSM8K test prompts")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads (1: on a shared machine OpenMP spin-waits inflate timings)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_ar_only(args.model, what="this benchmark")
    task = get_task("gsm8k", 0)
    costs: dict[int, list[float]] = {k: [] for k in ROWS}
    lengths = []
    for sample in task.load("test", limit=args.prompts):
        ids = prompt_ids(task, sample, target.tokenizer)
        lengths.append(len(ids))
        session = target.start(ids[:-1])
        session.forward(torch.tensor([], dtype=torch.long), [])  # prefill all but the last prompt token
        session.commit([], ids[-1])
        for k in ROWS:
            costs[k].append(forward_seconds(session, k, args.reps))
    print(
        f"{args.model}, {len(lengths)} GSM8K prompts of {min(lengths)}-{max(lengths)} tokens, "
        f"{args.threads} threads, median of {args.reps} forwards each"
    )
    base = statistics.mean(costs[1])
    print(f"{'rows k':>7} {'ms/forward':>11} {'x 1-row':>8}")
    for k in ROWS:
        mean = statistics.mean(costs[k])
        print(f"{k:>7} {mean * 1000:>11.2f} {mean / base:>8.2f}")


if __name__ == "__main__":
    main()

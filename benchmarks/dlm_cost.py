"""The cost of one block-causal diffusion target pass by draft-tree size and batch (a script, not a
test), and what it bounds.

A speculative pass of a diffusion target evaluates the root state and every drafted node, each a
whole block of `block_length` rows, over the generation's cached prefix; plain decoding evaluates
the root only. A pass that costs c(n) for n states and commits tau tokens beats plain decoding
(one state, tau_plain tokens) in wall time only when tau / c(n) > tau_plain / c(1); and tau can
never exceed the block length. So c(n) / c(1) is the commits per pass a proposer needs to break
even against top1 plain decoding (which commits one token a pass), and block_length / (c(n) / c(1))
is the most speedup_wall any proposer can reach at that tree size.

Per tree size (states n = budget + 1), the median over repetitions of the pass alone (the machine
may be shared), for `--batch-sizes` generations at once (`DLMTarget.forward_many`, padded as `run`
batches), each over a GSM8K test prompt whose first blocks have been committed.

    python benchmarks/dlm_cost.py [--model sdar-smollm2] [--block-length 4] [--budgets 0,1,2,3,4,8,16]
        [--batch-sizes 1,8] [--reps 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from harness.targets.registry import load_target
from harness.targets.target import DLMTarget, TargetSession
from tasks.base import prompt_ids
from tasks.registry import get_task


def sessions_at_answer(target: DLMTarget, count: int, block_length: int, blocks: int) -> list[TargetSession]:
    """`count` generations over GSM8K test prompts, `blocks` blocks into the answer (committed as
    all-masked states' argmax: any tokens do, only the cache length matters)."""
    task = get_task("gsm8k", 0)
    sessions = []
    for sample in task.load("test", limit=count):
        session = target.start(prompt_ids(task, sample, target.tokenizer), 256, block_length)
        for _ in range(blocks):
            state = session.first_state()
            logits = session.forward(state[None]).current[0]
            state = torch.where(state == target.mask_id, logits.argmax(-1).cpu(), state)
            state[state == target.eos_id] = 0  # stay inside the answer
            session.finish_block(state)
        sessions.append(session)
    return sessions


def pass_seconds(target: DLMTarget, sessions: list[TargetSession], states: int, reps: int) -> float:
    """Median wall time of one pass over `states` all-masked block states of every session."""
    tree = [torch.full((states, s.block_length), target.mask_id, dtype=torch.long) for s in sessions]
    passes = list(zip(sessions, tree))
    target.forward_many(passes)  # the first pass after a finished block stores it: not timed
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        target.forward_many(passes)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sdar-smollm2")
    parser.add_argument("--block-length", type=int, default=4)
    parser.add_argument("--budgets", default="0,1,2,3,4,8,16", help="draft budgets (tree size - 1)")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--blocks", type=int, default=8, help="answer blocks committed before timing")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.model)
    if not isinstance(target, DLMTarget):
        parser.error(f"{args.model} is autoregressive; benchmarks/ar_cost.py times its passes")
    budgets = [int(b) for b in args.budgets.split(",")]
    size = args.block_length
    print(f"{args.model}, block length {size}, {args.threads} threads, median of {args.reps} passes")
    print("x plain: the pass's cost over a plain pass's, = the commits per pass that break even")
    print(f"{'batch':>5} {'budget':>6} {'rows':>6} {'ms/pass':>9} {'x plain':>8} {'max wall':>9}")
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        sessions = sessions_at_answer(target, batch, size, args.blocks)
        plain = pass_seconds(target, sessions, 1, args.reps)
        for budget in budgets:
            seconds = plain if budget == 0 else pass_seconds(target, sessions, budget + 1, args.reps)
            ratio = seconds / plain
            rows = batch * (budget + 1) * size
            print(
                f"{batch:>5} {budget:>6} {rows:>6} {seconds * 1000:>9.1f} {ratio:>8.2f} {size / ratio:>8.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""What SPOT's proposer costs against the target pass it drafts for (a script, not a test).

Decodes a few arith and GSM8K test prompts speculatively with SPOT (the zoo checkpoint) on every zoo
target and budget, and prints per (target, T, budget), per speculative pass: the target's time, the
proposer's time and their ratio, the network calls and rows of the batched search
(proposers/spot_tree.py), and, in the same process on the same requests, the time of the search it
replaced (one network call per expanded node, batch 1: `reference_tree` of
tests/proposers/test_spot_tree.py, the reference the tests compare trees with). Both searches run on
every request, alternating which goes first, and the `same` column counts the passes whose trees are
identical (the batched tree drives the decode). The coupled noise is drawn before the timers: it is
the decoding loop's cost, shared with the verifier. Passes include the first pass of each block,
where a block-causal target has no stale view and nothing is drafted.

    python benchmarks/proposer_cost.py [--targets sdar-a,sdar-b,llada-a,dream-a] [--budgets 2,4,8,16]
        [--temperatures 0] [--limit 2] [--lookaheads 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.decoding import DecodeConfig, DraftRequest, DraftTree, parse_rule, speculative_decode
from harness.targets.registry import load_target
from proposers.spot import SpotNet, zoo_spot
from proposers.spot_tree import grow
from tasks.base import prompt_ids
from tasks.registry import get_task


def load_reference():
    """The batch-1 search, from the test that holds it (one copy of the old algorithm)."""
    path = Path(__file__).resolve().parents[1] / "tests" / "proposers" / "test_spot_tree.py"
    spec = importlib.util.spec_from_file_location("spot_tree_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_tree


@dataclass
class Tally:
    passes: int = 0
    same: int = 0
    old_s: float = 0.0
    new_s: dict[int, float] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)


class SideBySide:
    """A proposer that runs the batched search (each lookahead) and the batch-1 search on every
    request, times each, and drafts the batched tree."""

    def __init__(self, net: SpotNet, lookaheads: list[int], reference, tally: Tally):
        self.net, self.lookaheads, self.reference, self.tally = net, lookaheads, reference, tally

    @torch.no_grad()
    def propose(self, request: DraftRequest) -> DraftTree:
        tally = self.tally
        tally.passes += 1
        if request.stale is None or request.budget == 0:
            return DraftTree()
        if request.noise:
            for depth in range(request.budget + 1):
                request.noise(request.step + depth)
        trees = {}
        arms = [*self.lookaheads, None] if tally.passes % 2 else [None, *self.lookaheads]
        for lookahead in arms:
            start = time.perf_counter()
            if lookahead is None:
                trees[None] = self.reference(self.net, request)
                tally.old_s += time.perf_counter() - start
                continue
            trees[lookahead], inputs = grow(self.net, request, lookahead)
            tally.new_s[lookahead] = tally.new_s.get(lookahead, 0.0) + time.perf_counter() - start
            tally.calls[lookahead] = tally.calls.get(lookahead, 0) + inputs.calls
            tally.rows[lookahead] = tally.rows.get(lookahead, 0) + inputs.rows
        tally.same += all(tree == trees[None] for tree in trees.values())
        return trees[self.lookaheads[0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sdar-a,sdar-b,llada-a,dream-a")
    parser.add_argument("--budgets", default="2,4,8,16")
    parser.add_argument("--temperatures", default="0")
    parser.add_argument("--tasks", default="arith,gsm8k")
    parser.add_argument("--limit", type=int, default=2, help="test prompts per task")
    parser.add_argument("--lookaheads", default="4", help="SpotProposer.lookahead values to time")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    lookaheads = [int(x) for x in args.lookaheads.split(",")]
    reference, net = load_reference(), zoo_spot()
    print(f"SPOT proposer cost per speculative pass (ms), gen {args.gen_length}, block {args.block_length}, "
          f"{args.limit} test prompts of each of {args.tasks}, 1 thread; new: lookahead {args.lookaheads}")
    new_head = " ".join(f"{'new@' + str(n):>8s} {'ratio':>6s} {'calls':>5s} {'rows':>5s}" for n in lookaheads)
    print(f"{'target':8s} {'T':>3s} {'budget':>6s} {'passes':>6s} {'target':>7s} {'old':>7s} {'old/tgt':>7s} "
          f"{new_head} {'same':>9s}")
    for name in args.targets.split(","):
        target = load_target(name)
        rule = parse_rule("top1", target.family, target.mask_id)
        prompts = []
        for task_name in args.tasks.split(","):
            task = get_task(task_name, num_fewshot=0)
            prompts += [prompt_ids(task, sample, target.tokenizer) for sample in task.load("test", limit=args.limit)]
        for temperature in [float(t) for t in args.temperatures.split(",")]:
            config = DecodeConfig(rule, args.gen_length, args.block_length, temperature, args.seed)
            for budget in [int(b) for b in args.budgets.split(",")]:
                tally, target_s = Tally(), 0.0
                for ids in prompts:
                    generation = speculative_decode(target, ids, SideBySide(net, lookaheads, reference, tally),
                                                    config, budget)
                    target_s += generation.metrics.target_s
                per_pass = 1e3 / tally.passes
                target_ms = target_s * per_pass
                cells = " ".join(
                    f"{tally.new_s[n] * per_pass:8.2f} {tally.new_s[n] * per_pass / target_ms:6.2f} "
                    f"{tally.calls[n] / tally.passes:5.2f} {tally.rows[n] / tally.passes:5.2f}" for n in lookaheads)
                print(f"{name:8s} {temperature:3g} {budget:6d} {tally.passes:6d} {target_ms:7.2f} "
                      f"{tally.old_s * per_pass:7.2f} {tally.old_s * per_pass / target_ms:7.2f} {cells} "
                      f"{tally.same:4d}/{tally.passes:<4d}", flush=True)


if __name__ == "__main__":
    main()

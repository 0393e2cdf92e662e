"""How far padding moves float32 logits, per target, against the near-tie tolerance (a script, not a test).

Decodes `--limit` test prompts of `--task` plainly at batch 1 and at `--batch-size` (padded rows,
`harness.targets.batching`), keeping every pass's logits, and prints the largest |difference| of a
pass's logits between the two up to the first pass where the trajectories part (after it the passes
see different states). `harness.lossless.NEAR_TIE` must sit well above it: a flip at a decision
whose gap is below the tolerance is excused as a near-tie, so the tolerance bounds what padding can
flip, and the ratio printed is its margin.

    python benchmarks/padding_margin.py --targets tiny-random:llada,tiny-random:dream,tiny-random:sdar,\
        tiny-random:llada2,tiny-random:converted,llada-a,dream-a,sdar-a,sdar-b
    python benchmarks/padding_margin.py --targets sdar-smollm2 --limit 8 --gen-length 64
"""

from __future__ import annotations

import argparse

import torch

from harness.decoding import DecodeConfig, parse_rule
from harness.lossless import largest_padding_shift, near_tie_tolerance
from harness.targets.registry import default_block_length, load_target
from harness.targets.target import DLMTarget
from tasks.base import prompt_ids
from tasks.chat import Chat
from tasks.registry import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="tiny-random:llada,tiny-random:dream,tiny-random:sdar,sdar-a")
    parser.add_argument("--task", default="arith")
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--gen-length", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = get_task(args.task, num_fewshot=0)
    samples = task.load("test", limit=args.limit)
    tolerance = near_tie_tolerance(torch.float32)
    print(f"{'target':24s} {'block':>5s} {'largest |dlogit|':>17s} {'tolerance':>10s} {'margin':>8s}")
    worst = 0.0
    for name in args.targets.split(","):
        target = load_target(name)
        assert isinstance(target, DLMTarget), f"{name}: a diffusion target"
        if target.tokenizer is None:
            prompts = [list(range(5, 5 + 3 + i % 7)) for i in range(args.limit)]
        else:
            chat = Chat(target.tokenizer, None, None)
            prompts = [prompt_ids(task, s, chat) for s in samples]
        block = default_block_length(name)
        gen = max(block, args.gen_length - args.gen_length % block)
        config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), gen, block, args.temperature, 0)
        shift = largest_padding_shift(target, prompts, config, args.batch_size)
        worst = max(worst, shift)
        margin = tolerance / shift if shift else float("inf")
        print(f"{name:24s} {block:5d} {shift:17.2e} {tolerance:10.0e} {margin:7.1f}x")
    margin = tolerance / worst if worst else float("inf")
    print(f"largest over targets: {worst:.2e}; tolerance {tolerance:.0e} is {margin:.1f}x above it")


if __name__ == "__main__":
    main()

"""How often a stale view's token is the one the target commits, by the view's age (a script, not a test).

An order proposer drafts, at a node d commits below the root, the candidate of a view d + 1 commits
old (`argmax(logit/T + G(seed, s))` of that view, with the noise of the step s that commits the
position). This decodes prompts of `--split` (test by default) plainly, keeps the logits, and for
every committed position and view age k = 1..--ages counts where that candidate is the committed
token (TOP), where the runner-up under the same scores is (RUNNER_UP), and neither: the ceiling an
order proposer works under, and the room a runner-up sibling has (proposers/spot/tree.py, docs/spot.md).
Where the view's greedy token (no noise) is a third token, `greedy` counts the commits that are that
token and `greedy/neither` the share of such neither-cases it covers
(`proposers.spot.features.GREEDY_SHARE_OF_NEITHER` is that share on training prompts).

    python benchmarks/stale_tokens.py --targets sdar-a --tasks arith,gsm8k --limit 40
    python benchmarks/stale_tokens.py --split train --limit 30 --temperatures 1
"""

from __future__ import annotations

import argparse

from harness.decoding import DecodeConfig, NoiseSource, parse_rule, plain_decode
from harness.targets.registry import load_dlm_target
from proposers.spot.features import StaleView, candidates
from tasks.base import prompt_ids
from tasks.registry import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sdar-a")
    parser.add_argument("--tasks", default="arith,gsm8k")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--ages", type=int, default=4)
    parser.add_argument("--block-length", type=int, default=32)
    args = parser.parse_args()
    size = args.block_length
    print(
        f"{'target':8s} {'task':6s} {'T':>3s} {'age':>3s} {'commits':>7s} {'top':>6s} {'runner-up':>9s} "
        f"{'greedy':>6s} {'greedy/neither':>14s}"
    )
    pooled = [0, 0]  # neither-cases with a third greedy token, and those where it was committed
    for target_name in args.targets.split(","):
        target = load_dlm_target(target_name, what="this benchmark")
        rule = parse_rule("top1", target.family, target.mask_id)
        for task_name in args.tasks.split(","):
            task = get_task(task_name, num_fewshot=0)
            for temperature in (float(t) for t in args.temperatures.split(",")):
                counts = {age: [0, 0, 0, 0, 0] for age in range(1, args.ages + 1)}
                for seed, sample in enumerate(task.load(args.split, limit=args.limit)):
                    config = DecodeConfig(rule, 64, size, temperature, seed)
                    plain = plain_decode(target, prompt_ids(task, sample, target.tokenizer), config, keep_logits=True)
                    assert plain.pass_logits is not None  # keep_logits
                    noise = NoiseSource(seed, size, target.vocab_size) if temperature > 0 else None
                    block_first = {
                        step: block.first
                        for block in plain.blocks(target.mask_id)
                        for step in range(block.first, block.end)
                    }
                    for step, transition in enumerate(plain.steps):
                        (position,), (token,) = transition.positions, transition.tokens
                        for age in range(1, min(step - block_first[step], args.ages) + 1):
                            sample_noise = noise(step)[position : position + 1] if noise else None
                            view = StaleView.of(
                                plain.pass_logits[step - age][position : position + 1], temperature, target.mask_id
                            )
                            drafted = candidates(view, sample_noise, rule)
                            top, runner_up = int(drafted.tokens[0]), int(drafted.runner_up[0])
                            counts[age][0] += 1
                            counts[age][1] += top == token
                            counts[age][2] += runner_up == token
                            if token not in (top, runner_up) and drafted.greedy_is_third(0):
                                counts[age][3] += int(drafted.greedy[0]) == token
                                counts[age][4] += 1
                for age, (total, top, runner_up, greedy, neither) in counts.items():
                    pooled[0] += neither
                    pooled[1] += greedy
                    print(
                        f"{target_name:8s} {task_name:6s} {temperature:3g} {age:3d} {total:7d} "
                        f"{top / max(1, total):6.3f} {runner_up / max(1, total):9.3f} "
                        f"{greedy / max(1, total):6.3f} {greedy / max(1, neither):14.3f}",
                        flush=True,
                    )
    print(f"greedy/neither pooled over all rows: {pooled[1]}/{pooled[0]} = {pooled[1] / max(1, pooled[0]):.3f}")


if __name__ == "__main__":
    main()

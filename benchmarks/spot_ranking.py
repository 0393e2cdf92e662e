"""How well a SPOT checkpoint ranks the next commit on each target (a script, not a test).

A minutes-long proxy for a transfer run (`spotbench run --transfer`): plain top1 trajectories of held-out
prompts on every target (arith train prompts from --start; the zoo SPOT recipes collect arith 0-499, so --start 500
gives prompts no zoo checkpoint trained on, and the default 300 does not), turned into the same
examples SPOT trains on, then the next-commit accuracy given the true path (top-1 and top-3) of the
checkpoint beside the confidence rule's (the rule simulated on the stale view), by temperature and
tree depth. A checkpoint that learned its training target's own order shows up here as a ratio below
1 on the other targets, before any speculative decoding is run.

    python benchmarks/spot_ranking.py [--checkpoint zoo/proposers/spot-sdar-a-grid] [--prompts 40]
"""

from __future__ import annotations

import argparse

import torch

from harness.targets.registry import load_dlm_target
from proposers.spot.collection import Views, collect
from proposers.spot.features import MASKED
from proposers.spot.network import SpotConfig, SpotNet, load_spot
from tasks.base import prompt_ids
from tasks.registry import get_task

DEPTHS = ((0, 1), (1, 4), (4, 16))


def held_out_examples(
    name: str, start: int, prompts: int, gen_length: int, block_length: int, config: SpotConfig
) -> dict:
    target = load_dlm_target(name, what="this benchmark")
    task = get_task("arith")
    parts = []
    for index, sample in enumerate(task.load("train", limit=start + prompts)[start:]):
        ids = prompt_ids(task, sample, target.tokenizer)
        for temperature in (0.0, 1.0):
            parts.append(collect(target, ids, gen_length, block_length, temperature, 1000 + index, config)[0])
    return Views.cat(parts)


@torch.no_grad()
def rankings(net: SpotNet, data: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(network top-1, network top-3, confidence rule's pick) per example."""
    top1, top3 = [], []
    for start in range(0, data["label"].numel(), 2048):
        index = torch.arange(start, min(data["label"].numel(), start + 2048))
        logp, _ = net(
            data["static"][data["view"][index]],
            data["candidate"][index],
            data["ages"][index].long(),
            data["depth"][index],
            data["temperature"][index],
        )
        top1.append(logp.argmax(1))
        top3.append(logp.topk(3, 1).indices)
    confidence = data["candidate"][..., 0].masked_fill(data["ages"].long() != MASKED, -torch.inf)
    return torch.cat(top1), torch.cat(top3), confidence.argmax(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="zoo/proposers/spot-sdar-a-grid")
    parser.add_argument("--targets", default="sdar-a,sdar-b,llada-a,dream-a")
    parser.add_argument("--start", type=int, default=300, help="first arith train prompt")
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    args = parser.parse_args()
    net = load_spot(args.checkpoint)
    print(f"{'target':8s} {'T':>3s} {'depths':>6s} {'spot':>6s} {'top3':>6s} {'rule':>6s} {'ratio':>6s}")
    for name in args.targets.split(","):
        data = held_out_examples(name, args.start, args.prompts, args.gen_length, args.block_length, net.config)
        top1, top3, rule = rankings(net, data)
        label = data["label"]
        for temperature in (0.0, 1.0):
            for low, high in DEPTHS:
                keep = (data["temperature"] == temperature) & (data["depth"] >= low) & (data["depth"] < high)
                spot = (top1[keep] == label[keep]).float().mean().item()
                three = (top3[keep] == label[keep, None]).any(1).float().mean().item()
                base = (rule[keep] == label[keep]).float().mean().item()
                print(
                    f"{name:8s} {temperature:3g} {f'{low}-{high - 1}':>6s} {spot:6.3f} {three:6.3f} {base:6.3f} "
                    f"{spot / base:6.2f}"
                )


if __name__ == "__main__":
    main()

"""SPOT's training examples: trajectories are plain decoding's, examples are what the proposer
sees, and the collection does not depend on how many processes run it."""

from __future__ import annotations

import pytest
import torch

from harness.decoding import DecodeConfig, NoiseSource, parse_rule, plain_decode
from harness.decoding.rules import candidate_scores
from harness.targets.registry import load_target
from proposers.spot.collection import collect
from proposers.spot.features import MASKED, NEITHER, RUNNER_UP, TOP
from proposers.spot.network import SpotConfig

PROMPT = list(b"Q: 2+2=?\nA:")


@pytest.mark.parametrize("family", ["sdar", "llada"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_collected_trajectory_is_plain_decoding_and_examples_are_consistent(family, temperature):
    target = load_target(f"tiny-random:{family}")
    views, positions = collect(target, PROMPT, 16, 8, temperature, 4, SpotConfig(max_depth=5))
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, temperature, 4)
    plain = plain_decode(target, PROMPT, cfg)
    assert positions == [t.positions[0] for t in plain.steps]
    # per block, its committed positions in order: the prompt's tail (absolute block grid) first
    blocks = [
        (b.start != target.mask_id).nonzero().squeeze(1).tolist() + positions[b.first : b.end]
        for b in plain.blocks(target.mask_id)
    ]
    for ages, depth, label in zip(views.ages.long(), views.depth.tolist(), views.label.tolist()):
        made = int((ages != MASKED).sum())
        recent = [int((ages == k).nonzero()) for k in range(min(made, depth + 1))][::-1]
        assert made >= depth and int(((ages >= 0) & (ages <= depth)).sum()) == len(recent)
        # some block's true order: the commits so far, the latest of them (the root's last and the
        # path) in order, then the label
        assert any(
            sorted(b[:made]) == sorted((ages != MASKED).nonzero().squeeze(1).tolist())
            and b[made - len(recent) : made + 1] == recent + [label]
            for b in blocks
        )
    block_start = (views.ages == MASKED).all(1) & (views.depth == 0)
    # full attention hands the next block's logits over as a stale view with nothing committed
    assert bool(block_start.any()) == (not target.family.caches_finished_blocks)
    assert 0 <= int(views.view.max()) < views.static.shape[0]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_token_outcomes_compare_the_stale_candidates_with_what_plain_decoding_commits(temperature):
    # Rebuilt from plain decoding's own logits: the example for the root after j + 1 commits at
    # depth d reads the pass before the root (step j) under the noise of step j + 1 + d. A trained
    # target, because a random one barely changes its logits between passes (always TOP).
    target = load_target("sdar-a")
    size, depths = 16, 5
    prompt = target.tokenizer.encode("Question: What is 17 + 25?\nAnswer:", add_special_tokens=False)
    views, _ = collect(target, prompt, 32, size, temperature, 4, SpotConfig(max_depth=depths))
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 32, size, temperature, 4)
    plain = plain_decode(target, prompt, cfg, keep_logits=True)
    noise = NoiseSource(4, size, target.vocab_size) if temperature > 0 else None
    expected = []
    for block in plain.blocks(target.mask_id):
        start, count = block.first, block.end - block.first
        for j in range(count - 2):
            for depth in range(min(depths, count - j - 2)):
                step = start + j + 1 + depth
                scores = candidate_scores(plain.pass_logits[start + j], noise(step) if noise else None, temperature)
                scores[:, target.mask_id] = -torch.inf
                (position,), (token,) = plain.steps[step].positions, plain.steps[step].tokens
                top, runner_up = scores[position].topk(2).indices.tolist()
                expected.append(TOP if top == token else RUNNER_UP if runner_up == token else NEITHER)
    assert views.token.tolist() == expected
    assert len(set(expected)) > 1

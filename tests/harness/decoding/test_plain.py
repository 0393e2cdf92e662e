"""The plain decoder's stale-token hit rate, recomputed independently from its trajectory."""

import pytest
import torch

from harness.decoding import DecodeConfig, parse_rule, plain_decode
from harness.targets.registry import load_target

PROMPT = [72, 105, 33, 32, 50, 43, 51]


def _recount(target, generation, config) -> tuple[int, int]:
    """Replay the trajectory state by state with fresh sessions and count the hits by hand."""
    hits = commits = 0
    size = config.block_length
    previous_greedy = None
    block_start_step = 0
    session = target.start(PROMPT, config.gen_length, size)
    state = torch.full((size,), target.mask_id)
    for step, transition in enumerate(generation.steps):
        output = session.forward(state[None])
        scores = output.current[0].clone()
        scores[:, target.mask_id] = -float("inf")
        if previous_greedy is not None:
            for position, token in zip(transition.positions, transition.tokens):
                commits += 1
                hits += int(previous_greedy[position]) == token
        previous_greedy = scores.argmax(-1)
        state = transition.apply(state)
        if not (state == target.mask_id).any():
            following = output.following
            if following is None:
                previous_greedy = None
            else:
                nxt = following[0].clone()
                nxt[:, target.mask_id] = -float("inf")
                previous_greedy = nxt.argmax(-1)
            session.finish_block(state)
            state = torch.full((size,), target.mask_id)
            block_start_step = step + 1
    assert block_start_step == len(generation.steps)
    return hits, commits


@pytest.mark.parametrize("family", ["sdar", "llada", "dream"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_stale_hit_rate_matches_an_independent_count(family: str, temperature: float) -> None:
    target = load_target(f"tiny-random:{family}:1")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 24, 8, temperature, 5)
    generation = plain_decode(target, PROMPT, config)
    hits, commits = _recount(target, generation, config)
    metrics = generation.metrics
    assert (metrics.stale_hits, metrics.stale_commits) == (hits, commits)
    # block-causal targets have no stale view on the first pass of each block
    blocks = len(generation.tokens) // config.block_length
    expected_commits = len(generation.steps) - (blocks if family == "sdar" else 1)
    assert commits == expected_commits
    assert 0 < hits <= commits

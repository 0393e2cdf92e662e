"""Plain decoding (the one block loop at budget 0) against independent loops: its trajectory and
its stale-token hit rate, recomputed by hand."""

import pytest
import torch

from harness.decoding import DecodeConfig, gumbel, parse_rule, plain_decode
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


def _naive_plain(target, config) -> tuple[list, torch.Tensor, int]:
    """Plain decoding written out directly from DESIGN.md section 3, one pass per commit, so the one
    block loop (plain = budget 0) is checked against something it does not share."""
    size, steps, blocks = config.block_length, [], []
    session = target.start(PROMPT, config.gen_length, size)
    for _ in range(config.gen_length // size):
        state = torch.full((size,), target.mask_id)
        while bool((state == target.mask_id).any()):
            logits = session.forward(state[None]).current[0]
            noise = gumbel(config.seed, len(steps), size, target.vocab_size) if config.temperature else None
            transition = config.rule(logits, state, noise, config.temperature)
            steps.append(transition)
            state = transition.apply(state)
        session.finish_block(state)
        blocks.append(state)
        if bool((state == target.eos_id).any()):
            break
    return steps, torch.cat(blocks), session.nfe


@pytest.mark.parametrize("family", ["sdar", "llada", "dream", "llada2"])
@pytest.mark.parametrize("rule", ["top1", "threshold:0.05"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_plain_decoding_is_the_naive_loop(family: str, rule: str, temperature: float) -> None:
    target = load_target(f"tiny-random:{family}:2")
    config = DecodeConfig(parse_rule(rule, target.family, target.mask_id), 24, 8, temperature, 11)
    generation = plain_decode(target, PROMPT, config)
    steps, tokens, nfe = _naive_plain(target, config)
    assert generation.steps == steps
    assert torch.equal(generation.tokens, tokens)
    assert generation.metrics.nfe == nfe == len(steps)
    assert generation.pass_commits == [1] * len(steps) and len(generation.records) == len(steps)

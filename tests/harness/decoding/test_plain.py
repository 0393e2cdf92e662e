"""Plain decoding (the one block loop at budget 0) against independent loops: its trajectory and
its stale-token hit rate, recomputed by hand."""

import pytest
import torch

from harness.decoding import DecodeConfig, Transition, gumbel, parse_rule, plain_decode
from harness.targets.registry import load_dlm_target

PROMPT = [72, 105, 33, 32, 50, 43, 51]


def _recount(target, generation, config) -> tuple[int, int]:
    """Replay the trajectory state by state with fresh sessions and count the hits by hand."""
    hits = commits = 0
    size = config.block_length
    previous_greedy = None
    block_start_step = 0
    session = target.start(PROMPT, config.gen_length, size)
    state = session.first_state()
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
    target = load_dlm_target(f"tiny-random:{family}:1")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 24, 8, temperature, 5)
    generation = plain_decode(target, PROMPT, config)
    hits, commits = _recount(target, generation, config)
    metrics = generation.metrics
    assert (metrics.stale_hits, metrics.stale_commits) == (hits, commits)
    # block-causal targets have no stale view on the first pass of each block
    blocks = len(generation.blocks(target.mask_id))
    expected_commits = len(generation.steps) - (blocks if family == "sdar" else 1)
    assert commits == expected_commits
    assert 0 < hits <= commits


def _naive_plain(target, prompt, config, answer_grid=False) -> tuple[list, torch.Tensor, list]:
    """Plain decoding written out from the families' published `generate` (docs/checkpoints.md) and
    DESIGN.md section 3, without the session (no cache, no fused prefill): one full recompute per
    commit. Block-causal families lay blocks on absolute positions from 0, so the first block holds
    the prompt's tail, and decode to the end of the block holding answer position gen_length - 1;
    full-attention families start blocks at the answer, with every later position masked.
    `answer_grid` starts block-causal blocks at the answer instead (a negative control)."""
    size, length = config.block_length, len(prompt)
    block_causal = target.family.attention == "block_causal"
    origin = length - length % size if block_causal and not answer_grid else length
    end = origin + -(-(length + config.gen_length - origin) // size) * size
    shift = 1 if target.family.shifted_logits else 0
    x = torch.full((end,), target.mask_id)
    x[:length] = torch.tensor(prompt)
    positions = torch.arange(end)
    ids = torch.where(positions < origin, positions // size, -(-origin // size) + (positions - origin) // size)
    steps: list[Transition] = []
    pass_logits: list[torch.Tensor] = []
    for start in range(origin, end, size):
        while bool((x[start : start + size] == target.mask_id).any()):
            seen = start + size if block_causal else end
            attend = ids[None, :seen] <= ids[:seen, None] if block_causal else None
            adapted = None
            if target.family.causal_context:  # converted: clean rows causal, the active block adapted
                assert attend is not None  # converted targets are block-causal
                active = positions[:seen] >= start
                attend = (positions[None, :seen] <= positions[:seen, None]) | (attend & active[:, None])
                adapted = active[None]
            with torch.no_grad():
                logits, _ = target.model(x[None, :seen], positions[:seen], attend, adapted=adapted)
            if start - shift < 0:  # a block at position 0 opens with a prompt token: no row predicts it
                logits = torch.cat([logits.new_zeros(1, shift, logits.shape[-1]), logits], dim=1)
                pass_logits.append(logits[0, start : start + size])
            else:
                pass_logits.append(logits[0, start - shift : start + size - shift])
            noise = gumbel(config.seed, len(steps), size, target.vocab_size) if config.temperature else None
            transition = config.rule(pass_logits[-1], x[start : start + size], noise, config.temperature)
            steps.append(transition)
            x[start : start + size] = transition.apply(x[start : start + size])
        if bool((x[max(start, length) : start + size] == target.eos_id).any()):
            break
    return steps, x[length : start + size], pass_logits


def _prompt(length: int) -> list[int]:
    return [(37 * i + 11) % 200 + 30 for i in range(length)]


@pytest.mark.parametrize("family", ["sdar", "llada", "dream", "llada2", "converted"])
@pytest.mark.parametrize("rule", ["top1", "threshold:0.05"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_plain_decoding_is_the_naive_loop(family: str, rule: str, temperature: float) -> None:
    """On prompts of every length mod the block length where the grid depends on it (block-causal
    families, top1), two lengths elsewhere; float64 row by row, so the cached and the recomputed
    passes cannot flip a near-tie."""
    target = load_dlm_target(f"tiny-random:{family}:2").exact()
    config = DecodeConfig(parse_rule(rule, target.family, target.mask_id), 24, 8, temperature, 11)
    every_residue = target.family.attention == "block_causal" and rule == "top1"
    for length in range(9, 17) if every_residue else (11, 16):
        prompt = _prompt(length)
        generation = plain_decode(target, prompt, config, keep_logits=True)
        steps, tokens, pass_logits = _naive_plain(target, prompt, config)
        assert generation.pass_logits is not None and generation.records is not None
        assert generation.first_state is not None
        assert generation.steps == steps, length
        assert torch.equal(generation.tokens, tokens)
        assert max(float((a - b).abs().max()) for a, b in zip(generation.pass_logits, pass_logits)) < 1e-9
        assert generation.metrics.nfe == len(steps)
        assert generation.pass_commits == [1] * len(steps) and len(generation.records) == len(steps)
        grid = length % 8 if target.family.attention == "block_causal" else 0
        assert generation.first_state[:grid].tolist() == prompt[length - grid :]
        assert (generation.first_state[grid:] == target.mask_id).all()


@pytest.mark.parametrize("family", ["sdar", "llada2"])
def test_the_block_grid_is_absolute_on_block_causal_targets(family: str) -> None:
    """Negative control of the naive loop above: blocks that start at the answer give other logits
    on the first pass of a prompt that ends mid-block; a gen_length that is not a multiple of the
    block length runs to the end of its block on the absolute grid."""
    target = load_dlm_target(f"tiny-random:{family}:2").exact()
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 13, 8, 0.0, 11)
    prompt = _prompt(11)
    generation = plain_decode(target, prompt, config, keep_logits=True)
    assert len(generation.tokens) in (5, 13, 21)  # blocks end at absolute positions 16, 24 and 32
    assert generation.pass_logits is not None
    first = generation.pass_logits[0][3:]  # the answer positions of the first block
    assert float((first - _naive_plain(target, prompt, config)[2][0][3:]).abs().max()) < 1e-9
    answer_first = _naive_plain(target, prompt, config, answer_grid=True)[2][0][:5]
    assert float((first - answer_first).abs().max()) > 1e-3


def test_an_eos_in_the_prompt_tail_does_not_end_the_answer() -> None:
    target = load_dlm_target("tiny-random:sdar:2")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, 0.0, 0)
    prompt = _prompt(10) + [target.eos_id]  # the tail shares the first block with the answer
    generation = plain_decode(target, prompt, config)
    assert (
        generation.first_state is not None
        and generation.first_state[2] == target.eos_id
        and target.eos_id not in generation.tokens.tolist()
    )
    assert len(generation.tokens) == 21  # to the end of the block holding answer position 15, not 5

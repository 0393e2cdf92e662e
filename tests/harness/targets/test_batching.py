"""The padded multi-generation pass (`forward_sessions`): each generation's rows get its own logits
(to float64 rounding) and keep its own pass and row counts, its KV store and stale view, for every
family; a padding mask that lets a row see another row's padding is caught (negative control)."""

from __future__ import annotations

import pytest
import torch

from harness.targets import batching
from harness.targets.registry import load_dlm_target, load_target
from harness.targets.target import forward_sessions

FAMILIES = ["llada", "dream", "sdar", "llada2", "converted"]
PROMPTS = [list(b"Q: 2+2=?\nA:"), list(b"hi"), list(b"The quick brown fox")]


def largest_difference(family: str) -> float:
    """Three generations of different prompt lengths, 1-3 rows each, block after block: the batched
    pass against each generation's own pass (float64 weights, rows batched)."""
    target = load_dlm_target(f"tiny-random:{family}")
    target.model.double()
    batched = [target.start(p, 24, 8) for p in PROMPTS]
    alone = [target.start(p, 24, 8) for p in PROMPTS]
    largest = 0.0
    for block in range(3):
        states = []
        for i, session in enumerate(batched):
            state = (session.first_state() if block == 0 else torch.full((8,), target.mask_id))[None].repeat(i + 1, 1)
            state[1:, -1] = 5  # rows differ
            states.append(state)
        together = forward_sessions(list(zip(batched, states)))
        for session, state, out in zip(alone, states, together):
            own = session.forward(state)
            largest = max(largest, float((out.current - own.current).abs().max()))
            assert (out.following is None) == (own.following is None)
            if out.following is not None and own.following is not None:
                largest = max(largest, float((out.following - own.following).abs().max()))
        for a, b, state in zip(batched, alone, states):
            final = state[0].clone()
            final[final == target.mask_id] = 7
            a.finish_block(final)
            b.finish_block(final)
    assert [(s.nfe, s.rows) for s in batched] == [(s.nfe, s.rows) for s in alone] == [(3, 3), (3, 6), (3, 9)]
    return largest


@pytest.mark.parametrize("family", FAMILIES)
def test_each_generation_gets_its_own_logits(family):
    assert largest_difference(family) < 1e-10


def test_a_row_that_sees_padding_is_caught(monkeypatch):
    """Defect: the full-attention padding mask lets every row attend to the padded keys."""
    real = batching.pad_full

    def leaky(rows, pad_id):
        tokens, attend = real(rows, pad_id)
        return tokens, torch.ones_like(attend)

    monkeypatch.setattr("harness.targets.target.pad_full", leaky)
    assert largest_difference("llada") > 1e-6


def test_a_batched_pass_is_of_one_target():
    a, b = load_target("tiny-random:sdar"), load_target("tiny-random:sdar")
    sa, sb = a.start(PROMPTS[0], 8, 8), b.start(PROMPTS[1], 8, 8)
    with pytest.raises(ValueError, match="one target"):
        forward_sessions([(sa, sa.first_state()[None]), (sb, sb.first_state()[None])])


def test_autoregressive_tree_passes_get_their_own_logits_and_caches():
    """Prefill passes, plain passes and draft trees of generations with other prompt lengths and
    caches in one call (float64 weights, rows batched), against each generation's own pass."""
    target = load_target("tiny-random-ar")
    target.model.double()
    prompts = [list(b"The quick brown fox"), list(b"hi"), list(b"abcabc")]
    batched = [target.start(p) for p in prompts]
    alone = [target.start(p) for p in prompts]
    trees = [([], []), ([5, 6, 7], [0, 1, 1]), ([9], [0])]
    largest = 0.0
    for step in range(4):
        passes = [
            (s, torch.tensor(tokens, dtype=torch.long), parents)
            for s, (tokens, parents) in zip(batched, trees if step else [([], [])] * 3)
        ]
        together = target.forward_many(passes)
        for session, (_, tokens, parents), out in zip(alone, passes, together):
            largest = max(largest, float((session.forward(tokens, parents) - out).abs().max()))
        for a, b, (_, _, parents) in zip(batched, alone, passes):
            path = [1] if parents else []
            a.commit(path, 11 + step)
            b.commit(path, 11 + step)
    assert largest < 1e-10
    assert [(s.nfe, s.rows, s.cached) for s in batched] == [(s.nfe, s.rows, s.cached) for s in alone]

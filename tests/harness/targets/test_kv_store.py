"""The autoregressive key/value store: batched passes read and write every generation's own slot, in
any slot order, through growth and slot reuse, and leave each generation's logits as its own pass's."""

from __future__ import annotations

import gc

import torch

from harness.targets.kv_store import CAPACITY_STEP, KVStore
from harness.targets.registry import load_target

EMPTY = torch.tensor([], dtype=torch.long)


def float64_target():
    target = load_target("tiny-random-ar")
    target.model.double()
    return target


def run_both(target, prompts, batched, alone, trees, paths, steps: int) -> float:
    """`steps` passes of `batched` sessions together and of `alone` one by one (the same trees),
    committing the same paths; the largest logit difference, and the last committed state's logits
    against a fresh generation of its whole text (so keys kept wrongly fail, batched or alone)."""
    largest = 0.0
    texts = [list(p) for p in prompts]
    for step in range(steps):
        passes = [
            (s, torch.tensor(tokens, dtype=torch.long), parents)
            for s, (tokens, parents) in zip(batched, trees if step else [([], [])] * len(batched))
        ]
        together = target.forward_many(passes)
        for session, (_, tokens, parents), out in zip(alone, passes, together):
            largest = max(largest, float((session.forward(tokens, parents) - out).abs().max()))
        for a, b, path, (tokens, _), text in zip(batched, alone, paths if step else [[]] * len(batched), trees, texts):
            a.commit(path, 11 + step)
            b.commit(path, 11 + step)
            text.extend([tokens[row - 1] for row in path] + [11 + step])
    now = target.forward_many([(s, EMPTY, []) for s in batched])
    for out, text in zip(now, texts):
        largest = max(largest, float((target.start(text).forward(EMPTY, []) - out).abs().max()))
    return largest


def test_scattered_slots_and_moved_paths_keep_each_generation_its_own():
    """Batched sessions in every other slot (the pass gathers their rows), trees whose accepted path
    is not their first nodes (its keys move up in the slot), other prompt lengths and widths; the
    committed keys end up where each generation's own passes put them (padded rows may differ from
    a lone pass in the last bits of float64)."""
    target = float64_target()
    prompts = [list(b"The quick brown fox"), list(b"hi"), list(b"abcabc"), list(b"z")]
    batched, alone = [], []
    for prompt in prompts:
        batched.append(target.start(prompt))
        alone.append(target.start(prompt))
    assert [s.slot for s in batched] == [0, 2, 4, 6]
    trees = [([5, 6, 7], [0, 0, 2]), ([], []), ([9, 8], [0, 0]), ([3, 4, 5, 6], [0, 1, 0, 3])]
    paths = [[2, 3], [], [2], [3, 4]]
    assert run_both(target, prompts, batched, alone, trees, paths, 5) < 1e-10
    after_last = [(s.nfe - 1, s.rows - 1, s.cached) for s in batched]  # run_both's final plain pass
    assert after_last == [(s.nfe, s.rows, s.cached) for s in alone]
    for a, b in zip(batched, alone):
        for (ka, va), (kb, vb) in zip(a.stored(), b.stored()):
            torch.testing.assert_close(ka, kb, atol=1e-10, rtol=0)
            torch.testing.assert_close(va, vb, atol=1e-10, rtol=0)


def test_reused_slots_and_a_growing_store_change_nothing():
    """A finished generation's slot goes to the next one, whose stale columns it never reads; a
    prompt longer than the store's capacity grows it mid-job without losing the others' keys."""
    target = float64_target()
    short, long = list(b"first prompt"), list(b"a long prompt " * 25)[: CAPACITY_STEP + 40]
    first = [target.start(short) for _ in range(3)]
    target.forward_many([(s, EMPTY, []) for s in first])
    for s in first:
        s.commit([], 7)
    assert target.store.keys.shape[3] == CAPACITY_STEP
    del first[1]
    gc.collect()
    batched = [first[0], target.start(long), first[1]]
    assert batched[1].slot == 1
    alone = [target.start(short), target.start(long), target.start(short)]
    for session in (alone[0], alone[2]):
        session.forward(EMPTY, [])
        session.commit([], 7)
    texts = [short + [7], long, short + [7]]
    trees = [([1, 2], [0, 1]), ([4], [0]), ([5, 6], [0, 0])]
    assert run_both(target, texts, batched, alone, trees, [[1], [1], [2]], 3) < 1e-10
    assert target.store.keys.shape[3] > CAPACITY_STEP


def test_slots_are_taken_lowest_first_and_given_back():
    store = KVStore(layers=2)
    assert [store.take() for _ in range(3)] == [0, 1, 2]
    store.release(1)
    store.release(0)
    assert [store.take(), store.take(), store.take()] == [0, 1, 3]


def test_block_causal_sessions_in_scattered_reused_slots_through_growth():
    """Diffusion targets share the store the same way: batched generations in every other slot, one
    of them started late in a freed slot with a prompt that grows the store, block after block
    against each generation alone (float64 weights, rows batched)."""
    target = load_target("tiny-random:sdar")
    target.model.double()
    short, long = list(b"Q: 2+2=?\nA:"), list(b"a long prompt " * 25)[: CAPACITY_STEP + 40]
    batched, alone = [], []
    for prompt in (short, short, list(b"hi")):
        batched.append(target.start(prompt, 24, 8))
        alone.append(target.start(prompt, 24, 8))
    assert [s.slot for s in batched] == [0, 2, 4]
    largest = 0.0
    for block in range(3):
        if block == 1:  # a generation leaves, another takes its slot with a longer prompt
            del batched[1], alone[1]
            gc.collect()
            batched.insert(1, target.start(long, 16, 8))
            alone.insert(1, target.start(long, 16, 8))
            assert batched[1].slot == 2
        states = []
        for i, session in enumerate(batched):
            first = session.first_state() if session.block_index == 0 else torch.full((8,), target.mask_id)
            state = first[None].repeat(i + 1, 1)
            state[1:, -1] = 5
            states.append(state)
        together = target.forward_many(list(zip(batched, states)))
        for session, state, out in zip(alone, states, together):
            largest = max(largest, float((session.forward(state).current - out.current).abs().max()))
        for a, b, state in zip(batched, alone, states):
            final = state[0].clone()
            final[final == target.mask_id] = 7
            a.finish_block(final)
            b.finish_block(final)
    assert target.store.keys.shape[3] > CAPACITY_STEP
    assert largest < 1e-10

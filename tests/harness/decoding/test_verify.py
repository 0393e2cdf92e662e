"""The verifier's walk over many generations at once: each walk as if alone, whatever walks beside it."""

import torch

from harness.decoding import DraftNode, DraftTree, NoiseSource, Rule, Transition, prepare
from harness.decoding.noise import rows_many
from harness.decoding.verify import Verify, Walk, walk_all

MASK, V, B = 9, 10, 6


def rule(name: str) -> Rule:
    return Rule("top1", MASK, "prob") if name == "top1" else Rule("threshold", MASK, "prob", 0.9)


def request(seed: int, rule: Rule, temperature: float, drafted_right: bool, trace: bool = True) -> Verify:
    """A chain of two drafted nodes over random logits: the first drafts the target's own transition
    at the root (so the walk enters it) when `drafted_right`, else another token there."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, B, V, generator=generator) * 3
    noise = NoiseSource(seed, B, V) if temperature > 0 else None
    root = torch.full((B,), MASK)
    sample = rows_many([(noise, 7, torch.arange(B))])[0] if noise else None
    first = rule(logits[0], root, sample, temperature)
    if not drafted_right:
        first = Transition(first.positions, tuple((t + 1) % MASK for t in first.tokens))
    after = first.apply(root)
    masked = [p for p in range(B) if int(after[p]) == MASK]
    second = Transition((masked[0],), (3,))
    tree = prepare(DraftTree((DraftNode(0, first), DraftNode(1, second))), root, MASK, 8)
    return Verify(tree, logits, 7, noise, rule, temperature, trace)


def alone(r: Verify) -> Walk:
    """The walk written out for one generation, the rule called row by row."""
    walk = Walk()
    while True:
        row, depth = walk.rows[-1], len(walk.rows) - 1
        state = r.tree.states[row]
        sample = rows_many([(r.noise, r.step + depth, (state == MASK).nonzero().squeeze(1))])[0] if r.noise else None
        transition, record = r.rule.explain(r.logits[row], state, sample, r.temperature, r.trace)
        walk.transitions.append(transition)
        if record is not None:
            walk.records.append(record)
        child = r.tree.child(row, transition)
        if child is None:
            return walk
        walk.rows.append(child)


def test_walks_together_equal_walks_alone_for_mixed_rules_temperatures_and_trees():
    requests = [
        request(seed, rule(name), temperature, right)
        for seed, (name, temperature, right) in enumerate(
            [(n, t, r) for n in ("top1", "threshold") for t in (0.0, 1.0) for r in (True, False)] * 2
        )
    ]
    together = walk_all(requests)
    for r, walk in zip(requests, together):
        expected = alone(r)
        assert walk.rows == expected.rows and walk.transitions == expected.transitions
        assert walk.records == expected.records  # the traced forensics too, bit for bit
    # the walks are not all alike: some entered the drafted child, the others stopped at the root
    assert {len(w.rows) for w in together} >= {1, 2}
    assert all(len(w.rows) == 1 for r, w in zip(requests, together) if r.tree.child(0, w.transitions[0]) is None)


def test_a_walk_enters_a_drafted_child_only_when_it_holds_the_targets_transition():
    right, wrong = walk_all([request(0, rule("top1"), 0.0, True), request(0, rule("top1"), 0.0, False)])
    assert len(right.rows) >= 2 and right.rows[1] == 1  # accepted: it walked into node 0
    assert wrong.rows == [0] and len(wrong.transitions) == 1  # the bonus commit at the root
    assert right.transitions[0] == wrong.transitions[0]  # the same target, the same transition


def test_untraced_walks_keep_no_records():
    [walk] = walk_all([request(3, rule("threshold"), 1.0, True, trace=False)])
    assert walk.records == [] and walk.transitions

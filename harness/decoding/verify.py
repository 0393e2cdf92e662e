"""The verifier's walk, for every generation of a round at once (DESIGN.md section 3).

A generation's walk starts at the root of its draft tree: at each row it computes the target's own
transition there (the rule, on the row's logits, with the noise of step `step + depth`) and moves
to the child that drafted exactly that transition; where no child did, the transition is the bonus
commit and the walk ends. The walks of a round's generations go in lockstep, depth by depth, and
each depth's rows of every walk still going are scored in ONE `Rule.score_many` call: a batch of 16
generations costs one set of tensor operations per depth instead of 16. Every row is scored as it
would be alone, so the transitions (and the traced records) are the same bit for bit at any batch
size. Each generation's noise stays its own: its rows are drawn from its own `NoiseSource`, keyed by
its seed and steps (drawn together for the round's generations on a GPU, `rows_many`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import Tensor

from harness.decoding.noise import NoiseSource, rows_many
from harness.decoding.rules import Rule, StepRecord, Transition
from harness.decoding.tree import PreparedTree


@dataclass(frozen=True)
class Verify:
    """What a generation asks of the verifier: walk `tree` over its pass's logits."""

    tree: PreparedTree
    logits: Tensor
    """[1 + nodes, B, V] the pass's logits of the tree's rows (only the walked rows are read)."""
    step: int
    """The root's global commit step: the row at depth d is decided with noise(step + d)."""
    noise: NoiseSource | None
    rule: Rule
    temperature: float
    trace: bool
    """Keep a `StepRecord` per walked row (the plain reference's forensics)."""


@dataclass
class Walk:
    """A walk's result: the rows it walked (root first) and the target's transition at each; all
    but the last were drafted (accepted), the last is the bonus commit."""

    rows: list[int] = field(default_factory=lambda: [0])
    transitions: list[Transition] = field(default_factory=list)
    records: list[StepRecord] = field(default_factory=list)


def walk_all(requests: Sequence[Verify]) -> list[Walk]:
    """Every request's walk, in lockstep: one rule call per depth for all the walks still going
    (per rule and temperature, when a round mixes them)."""
    walks = [Walk() for _ in requests]
    going = list(range(len(requests)))
    while going:
        groups: dict[tuple[Rule, float, bool], list[int]] = {}
        for g in going:
            groups.setdefault((requests[g].rule, requests[g].temperature, requests[g].trace), []).append(g)
        going = []
        for (rule, temperature, trace), members in groups.items():
            asked, walking = [requests[g] for g in members], [walks[g] for g in members]
            transitions, records = decide_rows(rule, temperature, trace, asked, walking)
            for g, transition, record in zip(members, transitions, records):
                walk = walks[g]
                walk.transitions.append(transition)
                if record is not None:
                    walk.records.append(record)
                child = requests[g].tree.child(walk.rows[-1], transition)
                if child is not None:  # the target's transition was drafted: walk on
                    walk.rows.append(child)
                    going.append(g)
    return walks


def decide_rows(
    rule: Rule, temperature: float, trace: bool, requests: Sequence[Verify], walks: Sequence[Walk]
) -> tuple[list[Transition], list[StepRecord | None]]:
    """The rule's transition (and, traced, its record) at each walk's current row, in one scoring."""
    states = [r.tree.states[w.rows[-1]] for r, w in zip(requests, walks)]
    logits = [r.logits[w.rows[-1]] for r, w in zip(requests, walks)]
    noise = None
    if temperature > 0:  # the noise of each row's masked positions only: the rule reads no other
        noise = rows_many(
            [
                (r.noise, r.step + len(w.rows) - 1, (state == rule.mask_id).nonzero().squeeze(1))
                for r, w, state in zip(requests, walks, states)
            ]
        )
    scored = rule.score_many(logits, states, noise, temperature, keep_gaps=trace)
    transitions = rule.decide_scored(scored)
    records = [rule.record(s, temperature) if trace else None for s in scored]
    return transitions, records

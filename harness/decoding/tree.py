"""Draft trees and the proposer interface the speculative loop calls.

A draft tree holds candidate future states of the current block: node j has a parent (0 is the root,
j+1 is node j, so parents come first) and one transition that the proposer expects the target to
commit from the parent's state. Trees are general (any branching), so chain proposers and tree
proposers (SPOT, Spiffy) share one verifier.

The `Proposer` protocol lives here, beside the loop that calls it, because dependencies point
downward (`proposers -> harness`); `proposers` re-exports it. A proposer sees only what the
request carries: never the target's current logits, so it cannot change what gets committed.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from torch import Tensor

from harness.decoding.noise import NoiseSource
from harness.decoding.rules import Rule, Transition


@dataclass(frozen=True)
class DraftNode:
    parent: int
    """0 for the root, j + 1 for node j of the same tree."""
    transition: Transition


@dataclass(frozen=True)
class DraftTree:
    nodes: tuple[DraftNode, ...] = ()

    @staticmethod
    def chain(transitions: list[Transition]) -> DraftTree:
        return DraftTree(tuple(DraftNode(j, t) for j, t in enumerate(transitions)))


@dataclass(frozen=True)
class DraftRequest:
    """Everything a proposer may look at for one speculative pass."""

    stale: Tensor | None
    """[B, V] the target's last logits for this block (a parent of the root), None if there are none."""
    root: Tensor
    """[B] the current state of the block."""
    step: int
    """Global commit step of the root: the node at depth d is verified with noise(step + d)."""
    noise: NoiseSource | None
    """The generation's noise (None at T=0)."""
    rule: Rule
    temperature: float
    budget: int
    """Most draft nodes the pass will evaluate; extra nodes are dropped."""
    history: tuple[int, ...] = ()
    """The positions of this block committed so far, oldest first. The stale view is one commit old,
    so `history[-1]` is a commit it has not seen (SPOT reads that one)."""


class Proposer(Protocol):
    def propose(self, request: DraftRequest) -> DraftTree: ...


class BatchProposer(Protocol):
    """A proposer that drafts a round's trees for many generations in one call (`propose_all`):
    `propose_batch(proposers, requests)` returns `proposers[i].propose(requests[i])` for every i,
    where every `proposers[i]` has this proposer's class and `batch_key` (a network's outputs are
    computed for all of them at once). Why: one call per generation per round made the harness,
    not the target, the cost of a batched pass on a GPU."""

    batch_key: Hashable

    def propose(self, request: DraftRequest) -> DraftTree: ...

    def propose_batch(
        self, proposers: Sequence[BatchProposer], requests: Sequence[DraftRequest]
    ) -> list[DraftTree]: ...


BATCHING_CLASSES: dict[type, bool] = {}
"""Per proposer class, whether it is a `BatchProposer`."""


def drafts_in_batches(kind: type) -> bool:
    """Whether proposers of class `kind` are `BatchProposer`s, decided once per class: a protocol
    `isinstance` costs microseconds, and `propose_all` asks for every generation of every round."""
    if kind not in BATCHING_CLASSES:
        BATCHING_CLASSES[kind] = all(hasattr(kind, name) for name in ("propose_batch", "batch_key"))
    return BATCHING_CLASSES[kind]


def unbatched_notice(proposer: Any) -> str | None:
    """The one line a run records for a proposer that drafts one generation at a time, else None."""
    if drafts_in_batches(type(proposer)):
        return None
    return f"{type(proposer).__name__} has no propose_batch: it drafts one generation at a time in a batch"


def propose_all(proposers: Sequence[Proposer], requests: Sequence[DraftRequest]) -> tuple[list[DraftTree], list[float]]:
    """One round's drafts and the seconds each cost: the requests whose proposers share class and
    `batch_key` in one `propose_batch` call (its time split evenly), the others one by one."""
    groups: dict[tuple, list[int]] = {}
    for i, proposer in enumerate(proposers):
        kind = type(proposer)
        key = (kind, cast(BatchProposer, proposer).batch_key) if drafts_in_batches(kind) else (None, i)
        groups.setdefault(key, []).append(i)
    trees: list[DraftTree] = [DraftTree()] * len(requests)
    seconds = [0.0] * len(requests)
    for (kind, _), members in groups.items():
        before = time.perf_counter()
        if kind is None:
            trees[members[0]] = proposers[members[0]].propose(requests[members[0]])
        else:
            first = cast(BatchProposer, proposers[members[0]])
            batch = first.propose_batch(
                [cast(BatchProposer, proposers[i]) for i in members], [requests[i] for i in members]
            )
            for i, tree in zip(members, batch):
                trees[i] = tree
        elapsed = (time.perf_counter() - before) / len(members)
        for i in members:
            seconds[i] = elapsed
    return trees, seconds


@dataclass
class PreparedTree:
    """A validated tree as the verifier needs it: row states and a child lookup."""

    states: Tensor
    """[1 + nodes, B]: the root, then each kept node's state."""
    children: dict[tuple[int, Transition], int]
    """(row, transition) -> the child's row."""

    def child(self, row: int, transition: Transition) -> int | None:
        return self.children.get((row, transition))


def prepare(tree: DraftTree, root: Tensor, mask_id: int, budget: int) -> PreparedTree:
    """Validate a proposer's tree against the root state and lay out its rows.

    Nodes beyond the budget are truncated, and so is a node that would leave no masked position (its
    parent's bonus commit gives the same result without the row) or repeats a sibling; descendants
    of a dropped node go with it. A node that is structurally wrong (parent not before it, empty
    transition, a position outside the block or not masked in the parent) is a proposer bug:
    ValueError.
    """
    if not tree.nodes or budget <= 0:
        return PreparedTree(root[None], {})
    size = root.numel()
    states = [root]
    children: dict[tuple[int, Transition], int] = {}
    row_of = {0: 0}
    for index, node in enumerate(tree.nodes[:budget], start=1):
        positions = node.transition.positions
        if not 0 <= node.parent < index or not positions or not 0 <= positions[0] <= positions[-1] < size:
            raise ValueError(f"invalid draft node {index - 1}: {node}")
        parent_row = row_of.get(node.parent)
        if parent_row is None:
            continue
        parent = states[parent_row]
        if not bool((parent[list(positions)] == mask_id).all()):
            raise ValueError(f"draft node {index - 1} commits a position its parent already holds: {node}")
        key = (parent_row, node.transition)
        if key in children or len(positions) == int((parent == mask_id).sum()):
            continue
        row_of[index] = children[key] = len(states)
        states.append(node.transition.apply(parent))
    return PreparedTree(torch.stack(states), children)


NO_DRAFT, LEAF, POSITION, TOKEN = "no_draft", "leaf", "position", "token"
"""Why a pass stopped: the proposer drafted nothing; the walk reached a node with no children (its
branch of the budget ended there, or one mask was left); the target committed a position no child
drafted; or a child drafted its position(s) with other tokens. Order errors and token errors of a
proposer call for different fixes, so every arm records them."""


def stop_reason(tree: PreparedTree, row: int, transition: Transition) -> str:
    """Why the walk stopped at `row`, where the target's transition is `transition` and no child holds it."""
    if not tree.children:
        return NO_DRAFT
    drafted = [t for parent, t in tree.children if parent == row]
    if not drafted:
        return LEAF
    return TOKEN if any(t.positions == transition.positions for t in drafted) else POSITION

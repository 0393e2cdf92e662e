"""Replaying speculative decoding on a recorded plain generation: a proposer's passes, no target.

Why this is exact: the verifier enters a draft node only when its transition equals the target's
own, so every row it walks holds a state of the plain trajectory, the target's transition there is
the plain step, and the next stale view is the plain pass's logits at that state. How many passes a
proposer saves therefore depends only on the plain trajectory and the logits plain decoding computed
along it. One `plain_decode(..., keep_logits=True)` per prompt lets every (proposer, budget) arm be
scored without a target pass: minutes of decoding become seconds, which is what a study of many
checkpoints on many targets needs. It equals `speculative_decode` wherever a state's logits do not
depend on the batch it was evaluated in (the exactness mode; tests/harness/decoding/test_replay.py
checks it for every registered proposer). It measures passes only: exactness, wall time and scores
need real speculative decoding.

It also says why each pass stopped (`Replay.stops`), which is what tells a proposer's order errors
from its token errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoding.generation import DecodeConfig, Generation
from harness.decoding.noise import NoiseSource
from harness.decoding.rules import Transition
from harness.decoding.tree import DraftRequest, PreparedTree, Proposer, prepare

NO_DRAFT, LEAF, POSITION, TOKEN = "no_draft", "leaf", "position", "token"
"""Why a pass stopped: the proposer drafted nothing; the walk reached a node with no children (its
branch of the budget ended there, or one mask was left); the target committed a position no child
drafted; or a child drafted its position(s) with other tokens."""


def stop_reason(tree: PreparedTree, row: int, transition: Transition) -> str:
    """Why the walk stopped at `row`, where the target's transition is `transition` and no child holds it."""
    if not tree.children:
        return NO_DRAFT
    drafted = [t for parent, t in tree.children if parent == row]
    if not drafted:
        return LEAF
    return TOKEN if any(t.positions == transition.positions for t in drafted) else POSITION


@dataclass(frozen=True)
class Replay:
    nfe: int
    """Target passes speculative decoding would make (the plain generation's extra passes, such as
    KV-store passes, counted the same way)."""
    pass_commits: list[int]
    """Transitions committed by each speculative pass."""
    stops: list[str]
    """Why each pass stopped (`stop_reason`)."""


def replay(plain: Generation, proposer: Proposer, config: DecodeConfig, budget: int) -> Replay:
    if plain.pass_logits is None or plain.following is None:
        raise ValueError("replay needs a plain generation decoded with keep_logits=True")
    size, mask_id, steps = config.block_length, config.rule.mask_id, plain.steps
    vocab = plain.pass_logits[0].shape[-1]
    noise = NoiseSource(config.seed, size, vocab) if config.temperature > 0 else None
    pass_commits: list[int] = []
    stops: list[str] = []
    step, block, stale = 0, 0, None
    state = torch.full((size,), mask_id, dtype=torch.long)
    history: list[int] = []
    while step < len(steps):
        request = DraftRequest(stale, state, step, noise, config.rule, config.temperature, budget, tuple(history))
        tree = prepare(proposer.propose(request), state, mask_id, budget)
        row, depth = 0, 0
        while True:
            child = tree.child(row, steps[step + depth])
            if child is None:
                break
            row, depth = child, depth + 1
        stops.append(stop_reason(tree, row, steps[step + depth]))
        for transition in steps[step : step + depth + 1]:
            state = transition.apply(state)
            history.extend(transition.positions)
        stale = plain.pass_logits[step + depth]
        step += depth + 1
        pass_commits.append(depth + 1)
        if bool((state != mask_id).all()):
            stale = plain.following[block]
            block += 1
            state = torch.full((size,), mask_id, dtype=torch.long)
            history = []
    saved = len(steps) - len(pass_commits)
    return Replay(plain.metrics.nfe - saved, pass_commits, stops)

"""The oracle proposer: replays the true plain trajectory, the upper bound for a given budget.

It is built with the plain generation of the same prompt and seed (a cheat no real proposer has) and
proposes, as a chain, the next true transitions from the root step: as many as the budget allows,
short of the one that completes the block (that one is the verifier's bonus commit). Under top1 a
pass then commits min(budget + 1, masks left in the block) transitions. It stops at a transition
that does not apply to the root's state, which only happens after the arms have diverged.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.decoding import DraftRequest, DraftTree, Transition


class OracleProposer:
    def __init__(self, steps: Sequence[Transition]):
        self.steps = steps

    def propose(self, request: DraftRequest) -> DraftTree:
        mask_id, state = request.rule.mask_id, request.root
        chain: list[Transition] = []
        for transition in self.steps[request.step : request.step + request.budget]:
            if not all(int(state[p]) == mask_id for p in transition.positions):
                break
            state = transition.apply(state)
            if not bool((state == mask_id).any()):
                break
            chain.append(transition)
        return DraftTree.chain(chain)

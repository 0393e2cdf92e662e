"""The oracle proposer: replays the true plain trajectory, the upper bound for a given budget.

It is built with the plain generation of the same prompt and seed (a cheat no real proposer has) and
proposes, as a chain, the next true transitions from the root step: as many as the budget allows,
short of the one that completes the block (that one is the verifier's bonus commit). Under top1 a
pass then commits min(budget + 1, masks left in the block) transitions. It stops at a transition
that does not apply to the root's state, which only happens after the arms have diverged.

`oracle-order` (`stale_tokens=True`) drafts the same true positions with the stale view's candidate
tokens instead of the true ones (the rule's candidate under the noise of step s + depth, as the
confidence proposers and SPOT draft them): the ceiling of any proposer that only predicts the order.
What separates it from the oracle is the tokens the stale view gets wrong (docs/spot.md).

For autoregressive targets the oracle is `AROracleProposer`: the plain generation's next tokens as a
chain, so every pass commits min(budget + 1, tokens left) tokens (docs/autoregressive.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.decoding import DraftRequest, DraftTree, Transition
from harness.decoding.autoregressive import ARDraftRequest
from harness.decoding.rules import candidate_tokens


class OracleProposer:
    def __init__(self, steps: Sequence[Transition], stale_tokens: bool = False):
        self.steps = steps
        self.stale_tokens = stale_tokens

    @property
    def batch_key(self) -> bool:
        return self.stale_tokens

    def propose_batch(self, proposers: Sequence[OracleProposer], requests: Sequence[DraftRequest]) -> list[DraftTree]:
        """Each generation's chain from its own plain trajectory: list slicing, no tensor work to share."""
        return [proposer.propose(request) for proposer, request in zip(proposers, requests)]

    def propose(self, request: DraftRequest) -> DraftTree:
        mask_id, state = request.rule.mask_id, request.root
        if self.stale_tokens and request.stale is None:
            return DraftTree()
        chain: list[Transition] = []
        for depth, transition in enumerate(self.steps[request.step : request.step + request.budget]):
            if not all(int(state[p]) == mask_id for p in transition.positions):
                break
            if self.stale_tokens and request.stale is not None:  # (never None here: returned above)
                noise = request.noise(request.step + depth) if request.noise else None
                tokens = candidate_tokens(request.stale, noise, request.temperature, mask_id)
                transition = Transition(transition.positions, tuple(int(tokens[p]) for p in transition.positions))
            state = transition.apply(state)
            if not bool((state == mask_id).any()):
                break
            chain.append(transition)
        return DraftTree.chain(chain)


class AROracleProposer:
    """Drafts the plain AR trajectory's next tokens (built with the plain generation's tokens)."""

    def __init__(self, tokens: Sequence[int]):
        self.tokens = list(tokens)

    def propose(self, request: ARDraftRequest) -> DraftTree:
        done = request.context.numel() - request.prompt_length
        follow = self.tokens[done : done + request.budget]
        return DraftTree.chain([Transition((i,), (t,)) for i, t in enumerate(follow)])

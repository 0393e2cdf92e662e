"""Training-free confidence proposers (FreeDave / SSD style).

They assume the stale logits (the target's previous pass over this block) are still right and
simulate the target's own rule on them, with the noise of step s + depth, to draft the next states as
a chain. `confidence-branch` spends a third of the budget on a sibling at each of the first depths:
the rule's next choice once the chain's transition is taken out (under top1: the runner-up
position), which is accepted when the target merely swaps the order of its two most confident
positions. Without a stale view (first pass of a block on a block-causal target) they draft nothing.
"""

from __future__ import annotations

from harness.decoding import DraftNode, DraftRequest, DraftTree


class ConfidenceProposer:
    def __init__(self, branch: bool = False):
        self.branch = branch

    def propose(self, request: DraftRequest) -> DraftTree:
        if request.stale is None or request.budget == 0:
            return DraftTree()
        rule, mask_id = request.rule, request.rule.mask_id
        siblings_left = request.budget // 3 if self.branch else 0
        nodes: list[DraftNode] = []
        state, parent, depth = request.root, 0, 0
        while len(nodes) < request.budget:
            noise = request.noise(request.step + depth) if request.noise else None
            transition = rule(request.stale, state, noise, request.temperature)
            child = transition.apply(state)
            if not bool((child == mask_id).any()):
                break
            if siblings_left and len(nodes) + 2 <= request.budget:
                nodes.append(DraftNode(parent, rule(request.stale, child, noise, request.temperature)))
                siblings_left -= 1
            nodes.append(DraftNode(parent, transition))
            state, parent, depth = child, len(nodes), depth + 1
        return DraftTree(tuple(nodes))

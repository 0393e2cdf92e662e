"""Training-free confidence proposers (FreeDave / SSD style).

They assume the stale logits (the target's previous pass over this block) are still right and
simulate the target's own rule on them, with the noise of step s + depth, to draft the next states as
a chain. `confidence-branch` spends a third of the budget on a sibling at each of the first depths:
the rule's next choice once the chain's transition is taken out (under top1: the runner-up
position), which is accepted when the target merely swaps the order of its two most confident
positions. Without a stale view (first pass of a block on a block-causal target) they draft nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from harness.decoding import DraftNode, DraftRequest, DraftTree, Transition, steps_many


@dataclass
class Chain:
    """One request's chain while it grows: its state, last node, depth and nodes so far."""

    request: DraftRequest
    state: torch.Tensor
    siblings_left: int
    parent: int = 0
    depth: int = 0
    nodes: list[DraftNode] = field(default_factory=list)


class ConfidenceProposer:
    def __init__(self, branch: bool = False):
        self.branch = branch

    @property
    def batch_key(self) -> bool:
        return self.branch

    def propose(self, request: DraftRequest) -> DraftTree:
        return self.propose_batch([self], [request])[0]

    def propose_batch(self, proposers: Sequence[object], requests: Sequence[DraftRequest]) -> list[DraftTree]:
        """Every request's chain, grown depth by depth together: at each depth the rule runs once over
        the stale logits of every chain still growing with the same rule, temperature and block
        length (`Rule.decide_many`)."""
        trees = [DraftTree()] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            if r.stale is not None and r.budget > 0:
                groups.setdefault((r.rule, r.temperature, r.root.numel()), []).append(i)
        for members in groups.values():
            for i, tree in zip(members, self.chains([requests[i] for i in members])):
                trees[i] = tree
        return trees

    def chains(self, requests: list[DraftRequest]) -> list[DraftTree]:
        chains = [Chain(r, r.root, r.budget // 3 if self.branch else 0) for r in requests]
        rule, temperature, mask_id = requests[0].rule, requests[0].temperature, requests[0].rule.mask_id
        stale = [r.stale for r in requests if r.stale is not None]
        # at T=0 the stale view's scores decide every depth (`Scored`): scored once, not per depth
        fixed = rule.score_many(stale, [c.state for c in chains], None, 0.0) if temperature <= 0 else None

        def decide(
            members: list[int], states: list[torch.Tensor], noise: list[torch.Tensor] | None
        ) -> list[Transition]:
            """The rule's transitions from `states` of chains `members`, on each chain's stale view."""
            if not members:
                return []
            if fixed is not None:
                return [fixed[g].decide(rule, state) for g, state in zip(members, states)]
            return rule.decide_many([stale[g] for g in members], states, noise, temperature)

        growing = list(range(len(chains)))
        while growing:
            noise = None
            if temperature > 0:  # the rule's noise at each chain's next depth (step + depth)
                noise = steps_many(
                    [(chains[g].request.noise, chains[g].request.step + chains[g].depth) for g in growing]
                )
            transitions = decide(growing, [chains[g].state for g in growing], noise)
            children = [t.apply(chains[g].state) for g, t in zip(growing, transitions)]
            going = [k for k, child in enumerate(children) if bool((child == mask_id).any())]
            branching = [
                k
                for k in going
                if chains[growing[k]].siblings_left
                and len(chains[growing[k]].nodes) + 2 <= chains[growing[k]].request.budget
            ]
            picked = decide(
                [growing[k] for k in branching],
                [children[k] for k in branching],
                None if noise is None else [noise[k] for k in branching],
            )
            siblings = dict(zip(branching, picked))
            for k in going:
                chain = chains[growing[k]]
                if k in siblings:
                    chain.nodes.append(DraftNode(chain.parent, siblings[k]))
                    chain.siblings_left -= 1
                chain.nodes.append(DraftNode(chain.parent, transitions[k]))
                chain.state, chain.parent, chain.depth = children[k], len(chain.nodes), chain.depth + 1
            growing = [growing[k] for k in going if len(chains[growing[k]].nodes) < chains[growing[k]].request.budget]
        return [DraftTree(tuple(chain.nodes)) for chain in chains]

"""SPOT's proposer and its draft tree: best-first by path probability, with few, batched network calls.

`SpotProposer` grows a general tree best-first by the probability that the verifier walks a path
(position times token, multiplied along it) up to the budget. The token at a drafted position is the
stale view's candidate under the same rule as the target's (`argmax(logit/T + G(seed, s + depth))`,
mask excluded), so with coupled noise a right order is accepted at any temperature; where the token
head expects the target's logits to have moved, the runner-up under the same noise is drafted as a
sibling, and at T > 0 so is the stale greedy token where it is a third token. The verifier decides
what is committed, so SPOT is lossless by construction whatever the network outputs.

Scope: SPOT orders single commits, i.e. the `top1` rule. Under a threshold rule a node commits a set:
runs refuse `spot` there and name SPOT-Sets (proposers/spot_sets/); a library caller that builds
SPOT anyway gets the confidence chain (the rule simulated on the stale logits), so it stays lossless.
Without a stale view (first pass of a block on block-causal targets) it drafts nothing.

What the tree is: from the root, the network scores every next
commit (position times token choice); the frontier holds every scored but undrafted child; the best
one (-log P(path walked), ties to the earliest pushed) is drafted, and a drafted node's own children
are scored when its entry comes back to the top of the frontier (it comes back at once: a child
never scores higher than its parent), keeping the top `budget - drafted` positions of it.

Why this module: run that way, the proposer calls the network once per expanded node, with batch 1,
and on sdar-a at budget 8 it took longer than all the target passes it saved (26 s against 12.5 s
on one GSM8K prompt). The tree stays exactly the one that order builds (`grow`); what changes is
how its network outputs are obtained:
- the network's input at a node depends only on its depth and the positions its branch commits
  (`SearchInputs.ages`), so outputs are cached by that path, and siblings that draft different
  tokens at one position share one evaluation;
- the per-pass inputs (static features, the stale candidates of each depth) are computed once, on
  the stale logits' device, and moved once to the network's device (where its parameters are);
- on a miss, the missing node is evaluated together with the nodes a stand-in replay of the search
  expects to expand next (`plan`): up to `lookahead` rows in one call. The stand-in scores a node
  that has no output yet with its nearest evaluated ancestor's output, renormalized over the
  positions still masked (the network's ranking rarely changes much after one commit). A wrong
  guess only costs its row: the tree reads only real outputs;
- the network skips the work for outputs the search never reads (`masked_only`: the last layer's
  feed-forward rows of committed positions, proposers/spot/kernels.py); what it reads equals the
  module's output bit for bit (tests/proposers/spot/test_spot.py checks it on this machine's BLAS).
Batched rows can differ from a batch-1 call in the last float bits, so a near-tie between two
frontier entries (within ~1e-6) can be ordered otherwise than by batch-1 calls; lookahead 1 calls
the network exactly as the batch-1 search did.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.decoding import DraftNode, DraftRequest, DraftTree, Transition
from proposers.spot.features import CONFIDENCE, MASKED, RUNNER_UP, TOP
from proposers.spot.network import SpotEnsemble, SpotNet
from proposers.spot.search import (
    DEFAULT_LOOKAHEAD,
    PathSearch,
    Search,
    StaleViewTreeProposer,
    grow_together,
)

EXPAND = -1
"""A frontier entry's position for a drafted node whose children are not scored yet."""
Path = tuple[int, ...]
"""The positions a branch commits, root first: what the network's input at a node depends on."""
Entry = tuple[float, int, int, int, int, int]
"""A frontier entry: (-log P(path walked), tie-break, parent node, parent depth, position, choice)."""


@dataclass(frozen=True)
class Output:
    """The network's output at one node, read back once: a CPU row for `topk` and Python lists."""

    position: Tensor
    """[B] log P(next committed position), on the CPU (the search takes `topk` of it, like the
    batch-1 search did, so ties resolve the same way)."""
    position_list: list[float]
    token: list[list[float]] | None
    """[B][3] log P(TOP / RUNNER_UP / NEITHER | position committed next); None for `SearchInputs.prior`."""
    order: list[int]
    """The positions it allows, most likely first: planning walks it instead of sorting."""

    @staticmethod
    def of(position: Tensor, token: list[list[float]] | None) -> Output:
        values = position.tolist()
        order = sorted((i for i, v in enumerate(values) if v > -math.inf), key=values.__getitem__, reverse=True)
        return Output(position, values, token, order)


class SearchInputs(PathSearch[int, Output]):
    """SPOT's search inputs: paths of positions, outputs of `SpotNet` (or an ensemble)."""

    def step(self, ages: list[int], position: int) -> list[int]:
        """`proposers.spot.features.commit` on a list: the ages one commit (of `position`) later."""
        out = [a if a == MASKED else a + 1 for a in ages]
        out[position] = 0
        return out

    def inputs(self, paths: list[Path]) -> tuple[Tensor, ...]:
        n, depths = len(paths), [len(path) for path in paths]
        return (
            self.static.expand(n, -1, -1),
            torch.stack([self.at_depth(depth).features for depth in depths]),
            torch.tensor([self.ages(path) for path in paths], device=self.device),
            torch.tensor(depths, device=self.device),
            torch.full((n,), self.temperature, device=self.device),
        )

    def run(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return self.net(*inputs, masked_only=True)

    def store(self, paths: list[Path], outputs: tuple[Tensor, ...]) -> None:
        position, token = outputs
        tokens = token.tolist()
        for i, path in enumerate(paths):
            self.outputs[path] = Output.of(position[i], tokens[i])

    @functools.cached_property
    def prior(self) -> Output:
        """What planning assumes at the root before the network has run there: the masked
        positions ranked by the candidates' log-confidence (how the untrained network ranks them),
        softmaxed, and the candidate token only."""
        confidence = self.at_depth(0).features[:, CONFIDENCE].tolist()
        logits = torch.tensor([c if a == MASKED else -math.inf for c, a in zip(confidence, self._ages[()])])
        return Output.of(logits.double().log_softmax(-1), None)

    def stand_in(self, path: Path) -> tuple[Output, Path, float]:
        """A guess of the output at `path` for planning: its nearest evaluated ancestor's (or the
        prior), less the positions committed since (`removed`), whose position log-probabilities
        are renormalized by subtracting `shift` (the network's ranking rarely changes much after
        one commit)."""
        cut = len(path)
        while cut >= 0 and path[:cut] not in self.outputs:
            cut -= 1
        output = self.outputs[path[:cut]] if cut >= 0 else self.prior
        removed = path[max(cut, 0) :]
        mass = sum(math.exp(output.position_list[position]) for position in removed)
        return output, removed, math.log(max(1.0 - mass, 1e-30))


def plan(
    inputs: SearchInputs, frontier: list[Entry], paths: list[Path], drafted: int, missed: Entry, lookahead: int
) -> list[Path]:
    """The paths to evaluate in one call: the missed node's, then those a stand-in replay of the
    search expands next, uncached, up to `lookahead` rows.

    The replay is `grow`'s loop on copies of its state, with `SearchInputs.stand_in` where an output
    is missing; it plans only TOP and RUNNER_UP children (a GREEDY third child rarely ranks high).
    """
    wanted = [paths[missed[2]]]
    budget = inputs.request.budget
    frontier = frontier + [missed]
    heapq.heapify(frontier)
    paths = list(paths)
    while frontier and drafted < budget and len(wanted) < lookahead:
        neg_logp, counter, parent, depth, position, choice = heapq.heappop(frontier)
        path = paths[parent]
        if position != EXPAND:
            drafted += 1
            paths.append(path + (position,))
            heapq.heappush(frontier, (neg_logp, counter, len(paths) - 1, depth + 1, EXPAND, TOP))
            continue
        left = inputs.ages(path).count(MASKED)
        if left <= 1:
            continue
        if path not in inputs.outputs and path not in wanted:
            wanted.append(path)
        output, removed, shift = inputs.stand_in(path)
        children = itertools.islice((x for x in output.order if x not in removed), min(left, budget - drafted))
        for child in children:
            logp = output.position_list[child] - shift
            if output.token is None:
                heapq.heappush(frontier, (neg_logp - logp, counter, parent, depth, child, TOP))
                continue
            for choice in (TOP, RUNNER_UP):
                heapq.heappush(
                    frontier, (neg_logp - logp - output.token[child][choice], counter, parent, depth, child, choice)
                )
    return wanted


def grow(net: SpotNet | SpotEnsemble, request: DraftRequest, lookahead: int) -> tuple[DraftTree, SearchInputs]:
    """The best-first SPOT tree of `request` (stale view present, top1 rule, budget > 0), and the
    inputs it read (for the count of calls and rows): `search_tree` alone."""
    inputs = SearchInputs(net, request)
    return grow_together([(inputs, search_tree(inputs, lookahead))])[0], inputs


def search_tree(inputs: SearchInputs, lookahead: int) -> Search:
    """`grow`'s search, as a `Search` (so a batch's searches share network calls, `grow_together`).

    The loop is the batch-1 search's, entry for entry (so ties resolve alike): position EXPAND
    stands for a drafted node whose children are not scored yet; its output is read only when that
    entry is popped (its children cannot score higher), so leaves cost no row. A child is a position
    with the stale candidate, the runner-up or (where it is a third token) the greedy token, scored
    by P(position committed next) * P(that token).
    """
    budget = inputs.request.budget
    frontier: list[Entry] = [(0.0, 0, 0, 0, EXPAND, TOP)]
    paths: list[Path] = [()]
    nodes: list[DraftNode] = []
    counter = 0
    while frontier and len(nodes) < budget:
        entry = heapq.heappop(frontier)
        neg_logp, _, parent, depth, position, choice = entry
        if position == EXPAND:
            path = paths[parent]
            left = inputs.ages(path).count(MASKED)
            if left <= 1:
                continue  # the only child would complete the block: the verifier's bonus commit
            if path not in inputs.outputs:
                yield plan(inputs, frontier, paths, len(nodes), entry, lookahead)
            output, tables = inputs.outputs[path], inputs.at_depth(depth)
            assert output.token is not None  # evaluated by the network (only the prior has no token head)
            best = output.position.topk(min(left, budget - len(nodes)))
            for value, child in zip(best.values.tolist(), best.indices.tolist()):
                for choice, token_score in tables.choices(output.token[child], child):
                    counter += 1
                    heapq.heappush(frontier, (neg_logp - value - token_score, counter, parent, depth, child, choice))
            continue
        token = inputs.at_depth(depth).tokens[choice][position]
        nodes.append(DraftNode(parent, Transition((position,), (token,))))
        paths.append(paths[parent] + (position,))
        counter += 1
        heapq.heappush(frontier, (neg_logp, counter, len(nodes), depth + 1, EXPAND, TOP))
    return DraftTree(tuple(nodes))


class SpotProposer(StaleViewTreeProposer[SpotNet | SpotEnsemble]):
    """SPOT's draft trees (module docstring), grown by `grow`.

    `lookahead`: the most rows of one network call, the missing node's and those the search expects
    to expand next (`plan`); 1 calls the network once per expanded node, with batch 1. The tree
    does not depend on it (up to float near-ties, module docstring). Devices: the work over
    the vocabulary (stale view, candidates) runs on the stale logits' device, the network on its
    parameters' device (move it with `net.to(device)` to keep a GPU pass on the GPU); only features
    and outputs cross.
    """

    rule = "top1"

    def __init__(self, net: SpotNet | SpotEnsemble, lookahead: int = DEFAULT_LOOKAHEAD):
        super().__init__(net, lookahead)

    def search(self, request: DraftRequest) -> tuple[PathSearch, Search]:
        inputs = SearchInputs(self.net, request)
        return inputs, search_tree(inputs, self.lookahead)

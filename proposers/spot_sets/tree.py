"""SPOT-Sets' draft tree: best-first over whole set-transitions, scored by P(the verifier walks them).

A node's children are the sets the target may commit from it, with tokens. For an argmax j (the
position the rule forces) and the network's commit probabilities a_i of the other masked positions,
a child's log-probability is

    log q_j + log P(token at j) + sum_{i in S, i != j} (log a_i + log P(token at i))
                                + sum_{i not in S} log(1 - a_i),

a sum of independent per-position choices: position i is left out, or committed with the stale
candidate, the runner-up or (at T > 0, where it is a third token) the stale greedy token, exactly the
token choices of SPOT (`proposers.spot.tree.DepthTables`). The most probable child for j takes every
position's best choice (at tau 0.9 and a silent network: j plus the positions the stale view puts
at or above tau, the confidence-set transition); the next ones flip the least certain choices.

The whole tree is one best-first search over a frontier of (score, entry): an EXPAND entry scores a
drafted node's children when it comes to the top (one network call, cached by the branch's sets),
pushing each of the top argmax candidates' best child; popping a child drafts it and pushes its
successors in a lazy k-best enumeration of independent choices (`successors`), so children come out
in order of probability without listing the exponentially many sets. A child never scores higher
than its parent, so the frontier pops nodes in order of path probability, as SPOT's tree does.
A set that would fill the block is never drafted (the verifier's bonus commit does that), nor one a
sibling already drafts.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Hashable
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.decoding import DraftNode, DraftRequest, DraftTree, Transition
from proposers.spot.features import MASKED
from proposers.spot.search import DepthTables, PathSearch, Search, StaleViewTreeProposer, grow_together
from proposers.spot_sets.network import Calibration, SpotSetsNet, predict

Path = tuple[tuple[int, ...], ...]
"""The sets a branch commits, root first: what the network's input at a node depends on."""
Option = tuple[float, int, int]
"""One choice of one variable: (log-probability, position, token choice), token choice OUT for a
position left out of the set."""
OUT = -1
Entry = tuple[float, int, "int | Children", tuple[int, ...], int]
"""A frontier entry: (-score, tie-break, a node to EXPAND or a child enumeration, the child's ranks,
the enumeration's last changed variable)."""
DEFAULT_LOOKAHEAD = 3
"""As SPOT's (`proposers.spot.tree.DEFAULT_LOOKAHEAD`): on one CPU thread a network call's fixed cost is
about that of a few rows, so a guessed row pays when it is right a third of the time."""
MAX_POPS_PER_SLOT = 64
"""At most this many frontier pops per budget slot: popped children that are not drafted (a set that
fills the block or repeats a sibling) cost work, and this bounds it per pass."""


def commit_set(ages: list[int], positions: tuple[int, ...]) -> list[int]:
    """The ages one step later: every committed position one older, the set's positions 0."""
    out = [a if a == MASKED else a + 1 for a in ages]
    for position in positions:
        out[position] = 0
    return out


@dataclass(frozen=True)
class Output:
    """The network's (calibrated) output at one node, as Python lists."""

    position: list[float]
    """log q: the argmax, -inf where not masked."""
    commit: list[float]
    """Commit logits (committed besides the argmax)."""
    token: list[list[float]]
    order: list[int]
    """The masked positions, most likely argmax first."""


@dataclass
class Children:
    """The lazy enumeration of one node's children for one argmax: variables sorted by the cost of
    their first alternative, each with its options best first; `base` is the best child's score."""

    node: int
    """The parent's index in `nodes + 1` numbering (0 = root)."""
    depth: int
    variables: list[list[Option]]
    base: float

    def cost(self, variable: int, rank: int) -> float:
        options = self.variables[variable]
        return options[0][0] - options[rank][0]

    def successors(self, ranks: tuple[int, ...], last: int) -> list[tuple[float, tuple[int, ...], int]]:
        """The children after `ranks` in the enumeration (cost added, new ranks, new last variable).

        Each assignment of ranks has exactly one predecessor: bump the last changed variable's rank,
        start the next variable at rank 1, or move the last variable's rank 1 to the next variable.
        With variables sorted by their rank-1 cost every successor costs at least as much, so the
        frontier pops children in order (the classic k-best enumeration of independent choices)."""
        out = []
        following = last + 1
        if last >= 0 and ranks[last] + 1 < len(self.variables[last]):
            step = self.cost(last, ranks[last] + 1) - self.cost(last, ranks[last])
            out.append((step, ranks[:last] + (ranks[last] + 1,) + ranks[last + 1 :], last))
        if following < len(self.variables):
            added = self.cost(following, 1)
            out.append((added, ranks[:following] + (1,) + ranks[following + 1 :], following))
            if last >= 0 and ranks[last] == 1:
                moved = ranks[:last] + (0, 1) + ranks[following + 1 :]
                out.append((added - self.cost(last, 1), moved, following))
        return out

    def transition(self, ranks: tuple[int, ...], tables: DepthTables) -> Transition:
        chosen = sorted(
            (self.variables[v][r][1], self.variables[v][r][2])
            for v, r in enumerate(ranks)
            if self.variables[v][r][2] != OUT
        )
        return Transition(tuple(p for p, _ in chosen), tuple(tables.tokens[c][p] for p, c in chosen))


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


class NodeChoices:
    """Every masked position's options at one node, computed once: as a member of the set besides the
    argmax (left out, or committed with each token choice) and as the argmax (each token choice),
    best first, and the members ordered by the cost of their first alternative."""

    def __init__(self, output: Output, tables: DepthTables):
        self.output = output
        self.member: dict[int, list[Option]] = {}
        self.argmax: dict[int, list[Option]] = {}
        for position in output.order:
            choices = tables.choices(output.token[position], position)
            self.argmax[position] = sorted(((logp, position, c) for c, logp in choices), key=best_first)
            logit = output.commit[position]
            log_in = log_sigmoid(logit)
            options = [(log_sigmoid(-logit), position, OUT)] + [(log_in + logp, position, c) for c, logp in choices]
            self.member[position] = sorted(options, key=best_first)
        self.order = sorted(self.member.values(), key=first_alternative)
        self.member_total = sum(options[0][0] for options in self.order)

    def children(self, node: int, depth: int, score: float, argmax: int) -> Children:
        """The enumeration of the children whose argmax is `argmax`, at a node of path score `score`."""
        variables = [options for options in self.order if options[0][1] != argmax]
        forced = self.argmax[argmax]
        variables.insert(bisect.bisect([first_alternative(v) for v in variables], first_alternative(forced)), forced)
        base = score + self.output.position[argmax] + forced[0][0] + self.member_total - self.member[argmax][0][0]
        return Children(node, depth, variables, base)


def best_first(option: Option) -> float:
    return -option[0]


def first_alternative(options: list[Option]) -> float:
    return options[0][0] - options[1][0]


class SetSearch(PathSearch[tuple[int, ...], Output]):
    """SPOT's search inputs (stale candidates by depth, ages and network outputs by path) where a
    path's steps are sets, and the network is SPOT-Sets' with its calibration."""

    def __init__(self, net: SpotSetsNet, calibration: Calibration | None, request: DraftRequest):
        super().__init__(net, request)
        self.net: SpotSetsNet = net
        self.calibration = calibration

    def step(self, ages: list[int], last: tuple[int, ...]) -> list[int]:
        return commit_set(ages, last)

    def inputs(self, paths: list[Path]) -> tuple[Tensor, ...]:
        depths = [len(p) for p in paths]
        n, device = len(paths), self.device
        tau = self.request.rule.tau
        assert tau is not None  # a threshold rule (SpotSetsProposer.rule)
        return (
            self.static.expand(n, -1, -1),
            torch.stack([self.at_depth(d).features for d in depths]),
            torch.tensor([self.ages(p) for p in paths], device=device),
            torch.tensor(depths, device=device),
            torch.full((n,), self.request.temperature, device=device),
            torch.full((n,), float(tau), device=device),
        )

    def run(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return predict(self.net, self.calibration, *inputs)

    def store(self, paths: list[Path], outputs: tuple[Tensor, ...]) -> None:
        position, commit, token = outputs
        for i, path in enumerate(paths):
            self.outputs[path] = to_output(position[i], commit[i], token[i])


def to_output(position: Tensor, commit: Tensor, token: Tensor) -> Output:
    values = position.tolist()
    order = sorted((i for i, v in enumerate(values) if v > -math.inf), key=values.__getitem__, reverse=True)
    return Output(values, commit.tolist(), token.tolist(), order)


def upcoming(frontier: list[Entry], paths: list[Path], search: SetSearch, most: int) -> list[Path]:
    """Up to `most` nodes the search will likely expand next, known without the network: the best
    frontier entries, drafted nodes waiting for their children and children about to be drafted (a
    drafted child is expanded as soon as no entry beats it). Evaluating them with the node that
    missed saves calls; a wrong guess costs one row, and the tree reads only real outputs."""
    out: list[Path] = []
    for _, _, what, ranks, _ in heapq.nsmallest(4 * most, frontier):
        if isinstance(what, int):
            path = paths[what]
        else:
            path = paths[what.node] + (what.transition(ranks, search.at_depth(what.depth)).positions,)
        if len(out) < most and path not in search.outputs and path not in out and search.ages(path).count(MASKED) > 1:
            out.append(path)
    return out


def grow(
    net: SpotSetsNet, calibration: Calibration | None, request: DraftRequest, lookahead: int
) -> tuple[DraftTree, SetSearch]:
    """The best-first SPOT-Sets tree of `request` (stale view present, threshold rule, budget > 0),
    and what the search read (its calls and rows): `search_sets` alone."""
    search = SetSearch(net, calibration, request)
    return grow_together([(search, search_sets(search, lookahead))])[0], search


def search_sets(search: SetSearch, lookahead: int) -> Search:
    """`grow`'s search, as a `Search` (a batch's searches share network calls, `grow_together`)."""
    budget = search.request.budget
    nodes: list[DraftNode] = []
    paths: list[Path] = [()]
    drafted: set[tuple[int, Transition]] = set()
    counter = 0
    frontier: list[Entry] = [(0.0, 0, 0, (), -1)]
    pops = 0
    while frontier and len(nodes) < budget and pops < MAX_POPS_PER_SLOT * budget:
        pops += 1
        neg_score, _, what, ranks, last = heapq.heappop(frontier)
        if isinstance(what, int):  # EXPAND: score the children of node `what`
            path = paths[what]
            left = search.ages(path).count(MASKED)
            if left <= 1:
                continue  # the only child would complete the block: the verifier's bonus commit
            if path not in search.outputs:
                yield [path] + upcoming(frontier, paths, search, lookahead - 1)
            output = search.outputs[path]
            choices = NodeChoices(output, search.at_depth(len(path)))
            for argmax in output.order[: min(left, budget - len(nodes))]:
                children = choices.children(what, len(path), -neg_score, argmax)
                counter += 1
                heapq.heappush(frontier, (-children.base, counter, children, (0,) * len(children.variables), -1))
            continue
        for cost, following, changed in what.successors(ranks, last):
            counter += 1
            heapq.heappush(frontier, (neg_score + cost, counter, what, following, changed))
        transition = what.transition(ranks, search.at_depth(what.depth))
        parent_path = paths[what.node]
        if len(transition.positions) >= search.ages(parent_path).count(MASKED) or (what.node, transition) in drafted:
            continue
        drafted.add((what.node, transition))
        nodes.append(DraftNode(what.node, transition))
        paths.append(parent_path + (transition.positions,))
        counter += 1
        heapq.heappush(frontier, (neg_score, counter, len(nodes), (), -1))
    return DraftTree(tuple(nodes))


class SpotSetsProposer(StaleViewTreeProposer[SpotSetsNet]):
    """SPOT-Sets' draft trees (proposers/spot_sets/network.py), grown by `grow` (module docstring).

    `lookahead`: the most rows of one network call (the missing node and the chain guessed below
    it); the tree reads only real outputs, so it changes the cost, not the tree (up to float
    near-ties between batched and single rows). The network runs on its parameters' device.

    Scope: threshold rules with a probability confidence. Under `top1` (one position per step: SPOT's
    job) or a `margin` / `neg_entropy` convention it delegates to the confidence chain, so a library
    caller stays lossless; runs refuse a SPOT-Sets checkpoint under top1 or a tau it was not trained
    or calibrated for before they start (`proposers.registry`). Without a stale view (first pass of a
    block on a block-causal target) it drafts nothing.
    """

    rule = "threshold"

    def __init__(self, net: SpotSetsNet, calibration: Calibration | None = None, lookahead: int = DEFAULT_LOOKAHEAD):
        super().__init__(net, lookahead)
        self.calibration = calibration

    @property
    def batch_key(self) -> Hashable:
        """Proposers that draft together: same network, calibration and lookahead."""
        return id(self.net), id(self.calibration), self.lookahead

    def search(self, request: DraftRequest) -> tuple[PathSearch, Search]:
        search = SetSearch(self.net, self.calibration, request)
        return search, search_sets(search, self.lookahead)

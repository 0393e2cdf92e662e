"""What SPOT's and SPOT-Sets' tree searches share: the inputs of one pass (`PathSearch`), the network
calls of a batch's searches run in lockstep (`grow_together`), and the proposer around them.

A search is a generator (`Search`): it yields the paths whose network outputs it needs and is resumed
once they are stored. `grow_together` runs a round's searches side by side and evaluates what they
all wait for in ONE network call (per block length), so a batch of generations costs the network
calls of its longest search, not their sum (one call per search and step made SPOT's proposer the
harness's largest per-generation cost in a batch). A row's output does not depend on the rows beside
it: the matrix products have at least `proposers.spot.kernels.MIN_ROWS` rows, where MKL on this
project's CPU rounds every row alike (tests/proposers/spot/test_tree.py compares batched trees with
the batch-1 search's, tests/harness/decoding/test_batch.py whole decodes with batch 1's).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch
from torch import Tensor

from harness.decoding import DraftRequest, DraftTree, NoiseSource, steps_many
from proposers.baselines.confidence import ConfidenceProposer
from proposers.spot.features import (
    GREEDY,
    GREEDY_SHARE_OF_NEITHER,
    NEITHER,
    RUNNER_UP,
    SUPPORTED_CONFIDENCE,
    TOP,
    Candidates,
    StaleView,
    candidates,
    root_ages,
    static_features,
)
from proposers.spot.network import SpotEncoder, SpotEnsemble

LOG_GREEDY_SHARE = math.log(GREEDY_SHARE_OF_NEITHER)
DEFAULT_LOOKAHEAD = 3
"""`StaleViewTreeProposer.lookahead`: the most rows of one search's network call. On one CPU thread
a row of the network costs about as much as a call's fixed work, so a guessed row pays only if it is
right half the time: 2 to 4 were the fastest on sdar-a (budgets 8 and 16, within noise of each
other), 8 was slower (benchmarks/proposer_cost.py --lookaheads 1,2,3,4,8). On a GPU, where a call
costs about the same for any number of rows, a larger value saves calls (not measured)."""


@dataclass(frozen=True)
class DepthTables:
    """One depth's stale candidates, as the search reads them: Python lists, features on the device."""

    features: Tensor
    """[B, CANDIDATE_FEATURES] on the network's device."""
    tokens: dict[int, list[int]]
    """The token a child drafts at each position, by its choice (TOP, RUNNER_UP, GREEDY)."""
    greedy_third: list[bool]
    """Where the greedy token is neither candidate (`Candidates.greedy_is_third`)."""

    @staticmethod
    def of(drafted: Candidates, device: torch.device) -> DepthTables:
        tokens, runner_up, greedy = drafted.tokens.tolist(), drafted.runner_up.tolist(), drafted.greedy.tolist()
        third = [g != t and g != r for g, t, r in zip(greedy, tokens, runner_up)]
        return DepthTables(drafted.features.to(device), {TOP: tokens, RUNNER_UP: runner_up, GREEDY: greedy}, third)

    def choices(self, token_logp: list[float], position: int) -> list[tuple[int, float]]:
        """`Candidates.token_choices` on one position's row of the token head, as Python floats."""
        out = [(TOP, token_logp[TOP]), (RUNNER_UP, token_logp[RUNNER_UP])]
        if self.greedy_third[position]:
            out.append((GREEDY, token_logp[NEITHER] + LOG_GREEDY_SHARE))
        return out


Step = TypeVar("Step")
"""One step of a path: a position (SPOT) or a set of positions (SPOT-Sets)."""
Out = TypeVar("Out")
"""The network's output at one node (`Output`, or SPOT-Sets' own)."""


class PathSearch(Generic[Step, Out]):
    """Everything a search reads about one pass: the network's outputs by path (cached, batched),
    the stale candidates by depth, and the ages of every path; `step` and `score` are the
    network's."""

    def __init__(self, net: SpotEncoder | SpotEnsemble, request: DraftRequest):
        self.net = net
        self.request = request
        self.device = next(net.parameters()).device
        assert request.stale is not None  # drafted for with a stale view only (StaleViewTreeProposer.propose)
        self.view = StaleView.of(request.stale, request.temperature, request.rule.mask_id)
        self.static = static_features(self.view).to(self.device)[None]
        self.temperature = request.temperature
        self.depths: dict[int, DepthTables] = {}
        self.outputs: dict[tuple[Step, ...], Out] = {}
        self.calls = 0
        self.rows = 0
        self._ages: dict[tuple[Step, ...], list[int]] = {
            (): root_ages(request.root, request.rule.mask_id, request.history, net.config.max_age).tolist()
        }

    def at_depth(self, depth: int) -> DepthTables:
        """The candidates the target's rule sees at `depth` (noise of step + depth); without noise
        every depth has the same, computed once."""
        key = depth if self.request.noise else 0
        tables = self.depths.get(key)
        if tables is None:
            noise = self.request.noise(self.request.step + depth) if self.request.noise else None
            tables = self.depths[key] = DepthTables.of(candidates(self.view, noise, self.request.rule), self.device)
        return tables

    def noise_steps(self, paths: list[tuple[Step, ...]]) -> list[tuple[NoiseSource, int]]:
        """The noise steps `inputs(paths)` reads: a path of length d is scored with the candidates of
        depth d (step + d), in SPOT and SPOT-Sets alike; none without noise."""
        noise = self.request.noise
        return [] if noise is None else [(noise, self.request.step + d) for d in sorted({len(p) for p in paths})]

    def ages(self, path: tuple[Step, ...]) -> list[int]:
        """`step` applied along the path, in Python (a list per path, cached)."""
        ages = self._ages.get(path)
        if ages is None:
            ages = self._ages[path] = self.step(self.ages(path[:-1]), path[-1])
        return ages

    def step(self, ages: list[int], last: Step) -> list[int]:
        """The ages one step (`last`) later."""
        raise NotImplementedError

    def inputs(self, paths: list[tuple[Step, ...]]) -> tuple[Tensor, ...]:
        """The network's inputs at `paths`, one row each (`run` reads them)."""
        raise NotImplementedError

    def run(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        """The network on `inputs` (rows of this search's and of others with its `batch_key`)."""
        raise NotImplementedError

    def store(self, paths: list[tuple[Step, ...]], outputs: tuple[Tensor, ...]) -> None:
        """Keep the outputs (CPU rows, one per path) as this search's."""
        raise NotImplementedError

    def score(self, paths: list[tuple[Step, ...]]) -> None:
        """One network call for all `paths` (distinct, not cached yet), read back in one transfer."""
        score_together([(self, paths)])


def score_together(work: Sequence[tuple[PathSearch, list]]) -> None:
    """One network call for the paths of several searches (same network, block length and settings:
    one round's generations), read back in one transfer; the noise of the depths they read drawn
    together first (`steps_many`). A row's output does not depend on the rows
    beside it (the matrix products have at least `kernels.MIN_ROWS` rows, tests/proposers/spot)."""
    steps_many([step for search, paths in work for step in search.noise_steps(paths)])  # one call on a GPU
    parts = [search.inputs(paths) for search, paths in work]
    joined = parts[0] if len(parts) == 1 else tuple(torch.cat(column) for column in zip(*parts))
    with torch.inference_mode():  # the same kernels with less dispatch work per operation
        outputs = tuple(out.cpu() for out in work[0][0].run(*joined))
    start = 0
    for search, paths in work:
        search.store(paths, tuple(out[start : start + len(paths)] for out in outputs))
        search.calls += 1
        search.rows += len(paths)
        start += len(paths)


Search = Generator[list, None, DraftTree]
"""A tree search of one request: yields the paths it needs evaluated (`PathSearch.score`, done by
the caller before resuming it), returns the tree."""


def grow_together(searches: Sequence[tuple[PathSearch, Search]]) -> list[DraftTree]:
    """Run the searches in lockstep: each round, the paths every waiting search asks for go into one
    network call per block length (`score_together`), so a batch's searches cost the network calls
    of its longest one, not their sum."""
    trees: dict[int, DraftTree] = {}
    waiting: dict[int, list] = {}

    def advance(index: int) -> None:
        try:
            waiting[index] = next(searches[index][1])
        except StopIteration as stop:
            trees[index] = stop.value

    for index in range(len(searches)):
        advance(index)
    while waiting:
        by_size: dict[int, list[int]] = {}
        for index in waiting:
            by_size.setdefault(searches[index][0].request.root.numel(), []).append(index)
        for members in by_size.values():
            score_together([(searches[i][0], waiting.pop(i)) for i in members])
            for index in members:
                advance(index)
    return [trees[i] for i in range(len(searches))]


Net = TypeVar("Net", bound="SpotEncoder | SpotEnsemble")
"""A tree proposer's network."""


class StaleViewTreeProposer(Generic[Net]):
    """What SPOT and SPOT-Sets share around their tree search: a network `net`, the most rows of one
    of its calls (`lookahead`), nothing drafted without a stale view or budget, and the confidence
    chain under a rule other than theirs or a confidence that is not a probability (so a library
    caller stays lossless). `search` starts one request's tree search."""

    rule = ""
    """The rule's name (`Rule.name`) the tree search drafts for."""

    def __init__(self, net: Net, lookahead: int = DEFAULT_LOOKAHEAD):
        if lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {lookahead}")
        self.net = net
        self.lookahead = lookahead
        self.fallback = ConfidenceProposer()

    @property
    def batch_key(self) -> Hashable:
        """Proposers that draft together (`harness.decoding.tree.BatchProposer`): same network and lookahead."""
        return id(self.net), self.lookahead

    def propose(self, request: DraftRequest) -> DraftTree:
        return self.propose_batch([self], [request])[0]

    @torch.no_grad()
    def propose_batch(self, proposers: Sequence[object], requests: Sequence[DraftRequest]) -> list[DraftTree]:
        """Every request's tree, the searches run in lockstep (`grow_together`): one network call per
        step of the longest search, whatever the number of requests."""
        trees = [DraftTree()] * len(requests)
        searching: list[int] = []
        for i, request in enumerate(requests):
            if request.stale is None or request.budget == 0:
                continue
            if request.rule.name != self.rule or request.rule.confidence not in SUPPORTED_CONFIDENCE:
                trees[i] = self.fallback.propose(request)
            else:
                searching.append(i)
        for i, tree in zip(searching, grow_together([self.search(requests[i]) for i in searching])):
            trees[i] = tree
        return trees

    def search(self, request: DraftRequest) -> tuple[PathSearch, Search]:
        """The search of one request and its inputs (stale view present, the rule drafted for)."""
        raise NotImplementedError

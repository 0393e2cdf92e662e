"""Spiffy (arXiv 2509.18085): auto-speculative draft graphs calibrated offline, no draft model.

The paper's code is not available; this is a reconstruction, and docs/spiffy.md lists every decision
taken here. A draft commit is named by a pattern element `(i, j)` of the target's stale view (its last
pass over the block): the masked position of rank `i` in the rule's confidence order (ties: lowest
position) gets its rank-`j` token under the coupled noise (rank `j` of `logit/T + G(seed, s + depth)`,
or of `logit` at T=0; mask excluded, ties: lowest id). Ranks are taken afresh at every depth, among
the positions still masked in the node's parent, so `(0, 0)` repeated is exactly the confidence
chain and the graph can only add to it. Under a threshold rule a node commits a set: `(0, 0)` is the
rule simulated on the stale view (as the confidence proposer drafts it) and `(i, j)` is that set
with the rank-`i` position set to its rank-`j` token (added to the set if the rule left it out).

Calibration counts, along plain trajectories, which pattern (a sequence of elements) the target
actually committed from every root the speculative loop can see, prefix by prefix; the graph is the
D most frequent prefixes, a prefix-closed set whose nodes are the block states those sequences
reach. A speculative pass accepts a node exactly when its pattern is a prefix of the truth, so the D
most frequent prefixes maximise the expected commits per pass for that root distribution. At run
time the graph is pruned to the budget: nodes in frequency order, skipping those that do not apply
(a rank past the masks left, a commit that would fill the block) or that reach a state already
drafted at the same depth (the paper's graph merges such states; a draft tree gives each node one
parent, so the merged node keeps the first). The verifier is unchanged: lossless by construction.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from harness.decoding import (
    DecodeConfig,
    DraftNode,
    DraftRequest,
    DraftTree,
    Generation,
    NoiseSource,
    Rule,
    Transition,
    plain_decode,
)
from harness.targets.target import DLMTarget

Element = tuple[int, int]
"""(position rank, token rank) of one draft commit on the stale view."""
Pattern = tuple[Element, ...]
"""The commits from a root to a graph node, in order; its length is the node's depth."""
GRAPH_FILE = "spiffy.json"
FORMAT = "spiffy-graph/1"
DEFAULT_GRAPH = "spiffy-sdar-a"
"""The registry's bare `spiffy`: the zoo calibration for sdar-a (zoo/proposers/, docs/spiffy.md)."""


class StaleView:
    """The stale logits seen from one state at one depth: the masked positions in the rule's confidence
    order and, per position, the tokens in candidate-score order under that depth's noise."""

    def __init__(self, stale: Tensor, state: Tensor, noise: Tensor | None, temperature: float, rule: Rule):
        # The rule's own scoring, so rank 0 is the rule's choice by construction, in every convention.
        masked, _, confidence, scores = rule.score(stale, state, noise, temperature)
        ranked = torch.sort(confidence.cpu(), descending=True, stable=True).indices
        self.order: list[int] = masked.cpu()[ranked].tolist()
        self.row = {p: r for r, p in enumerate(masked.tolist())}
        self.scores = scores.index_fill(-1, torch.tensor([rule.mask_id], device=scores.device), -math.inf)
        self.simulated = rule(stale, state, noise, temperature) if rule.tau is not None else None

    def token(self, position: int, rank: int) -> int:
        row = self.scores[self.row[position]]
        return int(torch.sort(row, descending=True, stable=True).indices[rank])

    def token_rank(self, position: int, token: int) -> int:
        row = self.scores[self.row[position]]
        return int((row > row[token]).sum() + (row[:token] == row[token]).sum())

    def transition(self, element: Element) -> Transition | None:
        """The commit an element names from this state; None if the rank is past the masks left."""
        rank, token_rank = element
        if rank >= len(self.order):
            return None
        position = self.order[rank]
        commits = {position: self.token(position, token_rank)}
        if self.simulated is not None:
            commits = dict(zip(self.simulated.positions, self.simulated.tokens)) | commits
        positions = tuple(sorted(commits))
        return Transition(positions, tuple(commits[p] for p in positions))

    def name(self, transition: Transition) -> Element | None:
        """The element whose commit is `transition` (`transition(name(t)) == t`); None if there is none
        (threshold rules: a set that differs from the simulated one by more than one position)."""
        commits = dict(zip(transition.positions, transition.tokens))
        if self.simulated is not None:
            simulated = dict(zip(self.simulated.positions, self.simulated.tokens))
            if commits == simulated:
                return 0, 0
            changed = [p for p in commits if simulated.get(p) != commits[p]]
            if len(changed) != 1 or not simulated.keys() <= commits.keys():
                return None
            commits = {changed[0]: commits[changed[0]]}
        [(position, token)] = commits.items()
        return self.order.index(position), self.token_rank(position, token)


@dataclass(frozen=True)
class DraftGraph:
    """A calibrated graph: patterns, most frequent first (so every parent precedes its children)."""

    patterns: tuple[Pattern, ...]
    counts: tuple[int, ...]
    roots: int
    """How many roots (stale views with two or more masks left) were counted."""

    @staticmethod
    def from_counts(counts: Counter[Pattern], roots: int, nodes: int) -> DraftGraph:
        # A prefix is counted whenever its extensions are, so ties go to the shorter pattern and any
        # cut of this order is prefix-closed.
        best = sorted(counts.items(), key=lambda item: (-item[1], len(item[0]), item[0]))[:nodes]
        return DraftGraph(tuple(p for p, _ in best), tuple(c for _, c in best), roots)

    def to_json(self) -> dict[str, Any]:
        return {
            "roots": self.roots,
            "nodes": [{"pattern": [list(e) for e in p], "count": c} for p, c in zip(self.patterns, self.counts)],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> DraftGraph:
        nodes = data["nodes"]
        patterns = tuple(tuple((int(i), int(j)) for i, j in node["pattern"]) for node in nodes)
        return DraftGraph(patterns, tuple(int(node["count"]) for node in nodes), int(data["roots"]))


@dataclass(frozen=True)
class SpiffyCalibration:
    """One target's graphs, one per calibrated temperature, and where they came from."""

    provenance: dict[str, Any]
    """target, block_length, gen_length, rule, temperatures, nodes, seed, prompts, git_revision."""
    graphs: dict[float, DraftGraph]

    def graph(self, temperature: float) -> DraftGraph:
        """The graph of the nearest calibrated temperature (ties: the lower one)."""
        return self.graphs[min(sorted(self.graphs), key=lambda t: abs(t - temperature))]

    def save(self, folder: Path) -> None:
        """`spiffy.json`, one line per graph (an indented graph is a thousand lines of brackets)."""
        folder.mkdir(parents=True, exist_ok=True)
        header = json.dumps({"format": FORMAT, "provenance": self.provenance}, indent=1).removesuffix("\n}")
        graphs = ",\n".join(f'  "{t:g}": {json.dumps(g.to_json())}' for t, g in sorted(self.graphs.items()))
        (folder / GRAPH_FILE).write_text(f'{header},\n "graphs": {{\n{graphs}\n }}\n}}\n')

    @staticmethod
    def load(folder: Path) -> SpiffyCalibration:
        data = json.loads((folder / GRAPH_FILE).read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{folder / GRAPH_FILE} is not a {FORMAT} file")
        graphs = {float(t): DraftGraph.from_json(g) for t, g in data["graphs"].items()}
        return SpiffyCalibration(data["provenance"], graphs)


@functools.cache
def load_calibration(folder: Path) -> SpiffyCalibration:
    """A calibration folder, read once per process (a worker decodes many prompts with it)."""
    return SpiffyCalibration.load(folder)


def count_patterns(plain: Generation, config: DecodeConfig, counts: Counter[Pattern], max_depth: int) -> int:
    """Add the patterns one plain trajectory committed to `counts`, every prefix of every root's
    (up to `max_depth`); return how many roots were counted.

    A root is a state of the trajectory with a stale view (the previous pass's logits, or on
    full-attention targets the previous block's `following` logits for a block's first state) and
    two or more masks: what a speculative pass at that state would see. A commit that fills the block
    ends the pattern (the verifier's bonus commit, never a drafted node)."""
    if plain.pass_logits is None or plain.following is None:
        raise ValueError("calibration needs a plain generation decoded with keep_logits=True")
    rule, temperature = config.rule, config.temperature
    noise = NoiseSource(config.seed, config.block_length, plain.pass_logits[0].shape[-1]) if temperature > 0 else None
    roots = 0
    for block in plain.blocks(rule.mask_id):
        stale = None if block.index == 0 else plain.following[block.index - 1]
        for step, state in zip(range(block.first, block.end), block.states(plain.steps)):
            if noise:
                noise.forget_before(step)
            if stale is not None and int((state == rule.mask_id).sum()) > 1:
                roots += 1
                node = state
                pattern: Pattern = ()
                for truth in plain.steps[step : step + max_depth]:
                    if len(truth.positions) == int((node == rule.mask_id).sum()):
                        break
                    depth_noise = noise(step + len(pattern)) if noise else None
                    element = StaleView(stale, node, depth_noise, temperature, rule).name(truth)
                    if element is None:
                        break
                    pattern += (element,)
                    counts[pattern] += 1
                    node = truth.apply(node)
            stale = plain.pass_logits[step]
    return roots


def calibrate(
    target: DLMTarget,
    prompts: Iterable[list[int]],
    rule: Rule,
    temperatures: Iterable[float],
    gen_length: int,
    block_length: int,
    nodes: int,
    seed: int,
) -> dict[float, DraftGraph]:
    """Per temperature, the graph of the `nodes` most frequent patterns over the prompts' plain
    trajectories (prompt k decodes with seed + k). Deterministic: no sampling beyond the coupled noise."""
    prompts = list(prompts)
    graphs = {}
    for temperature in temperatures:
        counts: Counter[Pattern] = Counter()
        roots = 0
        for index, ids in enumerate(prompts):
            config = DecodeConfig(rule, gen_length, block_length, temperature, seed + index)
            roots += count_patterns(plain_decode(target, ids, config, keep_logits=True), config, counts, nodes)
        graphs[temperature] = DraftGraph.from_counts(counts, roots, nodes)
    return graphs


class SpiffyProposer:
    """Drafts the calibrated graph, pruned to the budget, as a tree on the current stale view."""

    def __init__(self, calibration: SpiffyCalibration):
        self.calibration = calibration

    def propose(self, request: DraftRequest) -> DraftTree:
        if request.stale is None or request.budget == 0:
            return DraftTree()
        mask_id = request.rule.mask_id
        rows: dict[Pattern, int] = {(): 0}  # pattern -> the tree row holding its state (0: the root)
        states, depths = [request.root], [0]
        drafted: dict[tuple[int, bytes], int] = {}  # (depth, state) -> row: merges equal states
        views: dict[int, StaleView] = {}
        nodes: list[DraftNode] = []
        for pattern in self.calibration.graph(request.temperature).patterns:
            if len(nodes) == request.budget:
                break
            parent = rows.get(pattern[:-1])
            if parent is None:
                continue  # its parent was pruned
            if parent not in views:
                depth = depths[parent]
                noise = request.noise(request.step + depth) if request.noise else None
                views[parent] = StaleView(request.stale, states[parent], noise, request.temperature, request.rule)
            transition = views[parent].transition(pattern[-1])
            if transition is None:
                continue
            state = transition.apply(states[parent])
            key = (depths[parent] + 1, state.numpy().tobytes())
            if key in drafted:
                rows[pattern] = drafted[key]  # the same state at the same depth: its children go under the first
                continue
            if not bool((state == mask_id).any()):
                continue  # it fills the block: the parent's bonus commit does that without a row
            nodes.append(DraftNode(parent, transition))
            rows[pattern] = drafted[key] = len(nodes)
            states.append(state)
            depths.append(depths[parent] + 1)
        return DraftTree(tuple(nodes))

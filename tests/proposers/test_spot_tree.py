"""SPOT's batched tree search builds the tree the batch-1 best-first search built, node for node."""

from __future__ import annotations

import functools
import heapq
import random

import pytest
import torch

from harness.decoding import DraftNode, DraftRequest, DraftTree, NoiseSource, Transition, parse_rule
from harness.targets.families import FAMILIES
from proposers.spot import (
    MASKED,
    TOP,
    Candidates,
    SpotConfig,
    SpotEnsemble,
    SpotNet,
    SpotProposer,
    StaleView,
    candidates,
    commit,
    root_ages,
    static_features,
    zoo_spot,
)
from proposers.spot_tree import grow

EXPAND = -1


@torch.no_grad()
def reference_tree(net: torch.nn.Module, request: DraftRequest, perturb: bool = False) -> DraftTree:
    """The search before batching (one network call per expanded node, batch 1), kept verbatim as
    the reference. `perturb` breaks ties among equal scores the other way (latest pushed first):
    the negative control, a search that differs only where the order of expansion is a tie."""
    if request.stale is None or request.budget == 0:
        return DraftTree()
    rule, budget, temperature = request.rule, request.budget, request.temperature
    view = StaleView.of(request.stale, temperature, rule.mask_id)
    static = static_features(view).cpu()[None]
    per_depth: dict[int, Candidates] = {}

    def at_depth(depth: int) -> Candidates:
        key = depth if request.noise else 0
        if key not in per_depth:
            noise = request.noise(request.step + depth) if request.noise else None
            per_depth[key] = candidates(view, noise, rule)
        return per_depth[key]

    frontier: list[tuple[float, int, int, int, int, int]] = [(0.0, 0, 0, 0, EXPAND, TOP)]
    ages = {0: root_ages(request.root, rule.mask_id, request.history, net.config.max_age)}
    nodes: list[DraftNode] = []
    counter = 0
    sign = -1 if perturb else 1
    while frontier and len(nodes) < budget:
        neg_logp, _, parent, depth, position, choice = heapq.heappop(frontier)
        if position == EXPAND:
            left = int((ages[parent] == MASKED).sum())
            if left <= 1:
                continue
            position_logp, token_logp = net(static, at_depth(depth).features[None], ages[parent][None],
                                            torch.tensor([depth]), torch.tensor([temperature]))
            best = position_logp[0].topk(min(left, budget - len(nodes)))
            for value, child in zip(best.values.tolist(), best.indices.tolist()):
                for choice, token_score in at_depth(depth).token_choices(token_logp[0], child):
                    counter += 1
                    heapq.heappush(frontier, (neg_logp - value - token_score, sign * counter, parent, depth, child,
                                              choice))
            continue
        token = at_depth(depth).token(choice, position)
        nodes.append(DraftNode(parent, Transition((position,), (token,))))
        ages[len(nodes)] = commit(ages[parent], position)
        counter += 1
        heapq.heappush(frontier, (neg_logp, sign * counter, len(nodes), depth + 1, EXPAND, TOP))
    return DraftTree(tuple(nodes))


@functools.cache
def random_net(seed: int) -> SpotNet:
    torch.manual_seed(seed)
    return SpotNet(SpotConfig()).eval()


def random_request(seed: int, vocab: int = 64) -> DraftRequest:
    """A random pass: block length, stale logits (some rows sharp, some flat), root, history,
    budget 1-16, T=0 or T=1 with the generation's noise."""
    rng = random.Random(seed)
    size = rng.choice([4, 8, 16, 32])
    mask_id = rng.randrange(vocab)
    generator = torch.Generator().manual_seed(seed)
    stale = torch.randn(size, vocab, generator=generator) * torch.rand(size, 1, generator=generator) * 8
    committed = rng.sample(range(size), rng.randrange(size - 1))  # at least two positions stay masked
    root = torch.full((size,), mask_id)
    for position in committed:
        root[position] = (mask_id + 1 + rng.randrange(vocab - 1)) % vocab
    temperature = rng.choice([0.0, 1.0])
    noise = NoiseSource(rng.randrange(1000), size, vocab) if temperature > 0 else None
    rule = parse_rule("top1", FAMILIES[rng.choice(["sdar", "dream"])], mask_id)  # prob, tempered_prob
    return DraftRequest(stale, root, rng.randrange(100), noise, rule, temperature, rng.randint(1, 16),
                        tuple(committed))


def nets() -> dict[str, torch.nn.Module]:
    return {"random": random_net(0), "zoo": zoo_spot(), "ensemble": SpotEnsemble([random_net(1), random_net(2)])}


@pytest.mark.parametrize("lookahead", [1, 4, 16])
@pytest.mark.parametrize("name", ["random", "zoo", "ensemble"])
def test_the_tree_is_the_batch_1_searchs_on_random_passes(name, lookahead):
    net = nets()[name]
    proposer = SpotProposer(net, lookahead)
    sizes = []
    for seed in range(60):
        req = random_request(seed)
        tree = proposer.propose(req)
        assert tree == reference_tree(net, req), f"seed {seed}"
        sizes.append(len(tree.nodes))
    assert max(sizes) >= 12 and min(sizes) <= 2  # the requests span small and large trees


def test_lookahead_trades_calls_for_rows():
    # Lookahead 1 evaluates exactly the nodes it expands, one per call; a longer lookahead makes
    # fewer calls. Siblings on one position share a row, so rows never exceed the reference's calls.
    net = zoo_spot()
    calls = {1: 0, 8: 0}
    for seed in range(30):
        req = random_request(seed)
        for lookahead in calls:
            _, inputs = grow(net, req, lookahead)
            calls[lookahead] += inputs.calls
            if lookahead == 1:
                assert inputs.rows == inputs.calls
    assert calls[8] < calls[1]


def test_a_search_that_breaks_ties_otherwise_is_caught():
    # Negative control: a zero head makes the position scores the clamped confidence gaps, so many
    # positions tie exactly; the tree-equality check must see the reversed tie-break.
    net = SpotNet(SpotConfig()).eval()
    for head in (net.head, net.token_head):
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
    differ = 0
    for seed in range(20):
        req = random_request(seed)
        tree = SpotProposer(net).propose(req)
        assert tree == reference_tree(net, req)
        differ += tree != reference_tree(net, req, perturb=True)
    assert differ > 0

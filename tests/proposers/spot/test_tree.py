"""SPOT's batched tree search builds the tree the batch-1 best-first search built, node for node."""

from __future__ import annotations

import functools
import heapq
import random

import pytest
import torch

from harness.decoding import (
    DecodeConfig,
    DraftNode,
    DraftRequest,
    DraftTree,
    NoiseSource,
    Transition,
    parse_rule,
    speculative_decode,
)
from harness.targets.families import FAMILIES
from harness.targets.registry import load_target
from proposers.spot.features import MASKED, TOP, Candidates, StaleView, candidates, commit, root_ages, static_features
from proposers.spot.network import SpotConfig, SpotEnsemble, SpotNet, zoo_spot
from proposers.spot.tree import SpotProposer, grow

EXPAND = -1
PERTURBATIONS = ("ties", "truncation", "depth")
"""Deliberately wrong variants of the reference (negative controls): `ties` breaks ties among equal
scores the other way (latest pushed first), `truncation` keeps every masked position as a child
instead of the best `budget - drafted`, `depth` tells the network the child's depth."""


@torch.no_grad()
def reference_tree(net: SpotNet | SpotEnsemble, request: DraftRequest, perturb: str | None = None) -> DraftTree:
    """The search before batching (one network call per expanded node, batch 1), kept verbatim as
    the reference, with an optional `PERTURBATIONS` variant."""
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
    sign = -1 if perturb == "ties" else 1
    while frontier and len(nodes) < budget:
        neg_logp, _, parent, depth, position, choice = heapq.heappop(frontier)
        if position == EXPAND:
            left = int((ages[parent] == MASKED).sum())
            if left <= 1:
                continue
            position_logp, token_logp = net(
                static,
                at_depth(depth).features[None],
                ages[parent][None],
                torch.tensor([depth + (perturb == "depth")]),
                torch.tensor([temperature]),
            )
            best = position_logp[0].topk(left if perturb == "truncation" else min(left, budget - len(nodes)))
            for value, child in zip(best.values.tolist(), best.indices.tolist()):
                for choice, token_score in at_depth(depth).token_choices(token_logp[0], child):
                    counter += 1
                    heapq.heappush(
                        frontier, (neg_logp - value - token_score, sign * counter, parent, depth, child, choice)
                    )
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
    return DraftRequest(stale, root, rng.randrange(100), noise, rule, temperature, rng.randint(1, 16), tuple(committed))


@functools.cache
def nets() -> dict[str, torch.nn.Module]:
    """Random weights, random weights with a sharp token head (its outputs vary much between
    positions, so runner-up and greedy siblings and the budget truncation matter), the zoo
    checkpoint, and an ensemble."""
    sharp = SpotNet(SpotConfig()).eval()
    sharp.load_state_dict(random_net(0).state_dict())
    with torch.no_grad():
        sharp.token_head.weight.mul_(5)
    return {
        "random": random_net(0),
        "sharp": sharp,
        "zoo": zoo_spot(),
        "ensemble": SpotEnsemble([random_net(1), random_net(2)]),
    }


@pytest.mark.parametrize("lookahead", [1, 3, 16])
@pytest.mark.parametrize("name", ["random", "sharp", "zoo", "ensemble"])
def test_the_tree_is_the_batch_1_searchs_on_random_passes(name, lookahead):
    net = nets()[name]
    proposer = SpotProposer(net, lookahead)
    sizes = []
    for seed in range(80):
        req = random_request(seed)
        tree = proposer.propose(req)
        assert tree == reference_tree(net, req), f"seed {seed}"
        sizes.append(len(tree.nodes))
    assert max(sizes) >= 12 and min(sizes) <= 2  # the requests span small and large trees


def test_lookahead_trades_calls_for_rows():
    # Lookahead 1 evaluates exactly the nodes it expands, one per call; a longer lookahead makes
    # fewer calls. Siblings on one position share a row.
    net = nets()["sharp"]
    calls = {1: 0, 8: 0}
    shared = 0
    for seed in range(40):
        req = random_request(seed)
        for lookahead in calls:
            tree, inputs = grow(net, req, lookahead)
            calls[lookahead] += inputs.calls
            if lookahead == 1:
                assert inputs.rows == inputs.calls
                drafted = {(node.parent, node.transition.positions) for node in tree.nodes}
                shared += len(tree.nodes) - len(drafted)  # siblings drafting another token
    assert calls[8] < calls[1] and shared > 0
    with pytest.raises(ValueError, match="lookahead"):
        SpotProposer(net, 0)


@pytest.mark.parametrize("perturb", PERTURBATIONS)
def test_a_perturbed_search_fails_the_equality(perturb):
    # Negative control: each deliberately wrong variant builds another tree on some passes. For
    # `ties`, zero heads make the position scores the clamped confidence gaps and the token
    # choices even, so many entries tie exactly.
    net = {"ties": None, "truncation": nets()["sharp"], "depth": nets()["zoo"]}[perturb]
    if net is None:
        net = SpotNet(SpotConfig()).eval()
        for head in (net.head, net.token_head):
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)
    proposer, differ = SpotProposer(net), 0
    for seed in range(60):
        req = random_request(seed)
        tree = proposer.propose(req)
        assert tree == reference_tree(net, req)
        differ += tree != reference_tree(net, req, perturb)
    assert differ > 0


@pytest.mark.parametrize("name", ["sdar-a", "llada-a"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_tree_is_the_batch_1_searchs_on_every_pass_of_a_zoo_decode(name, temperature):
    # Real stale views (sharp, with near-ties) and the zoo checkpoint, pass by pass.
    target = load_target(name)
    prompt = target.tokenizer.encode(
        "Question: Tom has 3 apples and buys 4 more. How many?\nAnswer:", add_special_tokens=False
    )
    net, passes = zoo_spot(), []

    class Checked:
        def propose(self, request: DraftRequest) -> DraftTree:
            tree = SpotProposer(net).propose(request)
            assert tree == reference_tree(net, request)
            passes.append(len(tree.nodes))
            return tree

    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 32, 32, temperature, 1)
    speculative_decode(target, prompt, Checked(), config, 8)
    assert len(passes) > 3 and max(passes) == 8


def depth(tree: DraftTree) -> int:
    """The deepest node's depth (0 for an empty tree)."""
    depths = [0]
    for node in tree.nodes:
        depths.append(depths[node.parent] + 1)
    return max(depths)


@pytest.mark.parametrize("name", ["sharp", "zoo"])
def test_a_batch_of_searches_costs_the_network_calls_of_its_longest_search(name):
    # One round of a batch: 16 requests drafted together build each request's batch-1 tree, in as
    # many network calls as the longest search alone needs (per block length: mixed sizes run apart).
    net = nets()[name]
    calls = [0]
    hook = net.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        for base in range(0, 96, 16):
            requests = [random_request(seed) for seed in range(base, base + 16)]
            alone: dict[int, list[int]] = {}
            for request in requests:
                alone.setdefault(request.root.numel(), []).append(grow(net, request, 3)[1].calls)
            calls[0] = 0
            trees = SpotProposer(net).propose_batch([], requests)
            assert calls[0] == sum(max(c) for c in alone.values()) < sum(sum(c) for c in alone.values())
            assert trees == [reference_tree(net, r) for r in requests]
    finally:
        hook.remove()


def test_with_the_zoo_network_a_batch_makes_at_most_two_calls_per_tree_level():
    net = zoo_spot()
    calls = [0]
    hook = net.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        requests = [r for r in (random_request(seed) for seed in range(400)) if r.root.numel() == 32]
        for start in range(0, 64, 16):
            calls[0] = 0
            trees = SpotProposer(net).propose_batch([], requests[start : start + 16])
            assert 0 < calls[0] <= 2 * max(depth(tree) for tree in trees)
    finally:
        hook.remove()

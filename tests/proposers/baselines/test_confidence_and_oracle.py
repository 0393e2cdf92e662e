"""Proposers: the oracle's chains are the true trajectory, confidence chains simulate the rule."""

from __future__ import annotations

import functools

import pytest
import torch

from harness.decoding import DecodeConfig, DraftRequest, NoiseSource, parse_rule, plain_decode, speculative_decode
from harness.errors import UserError
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import PROPOSERS, build_proposer
from proposers.baselines.confidence import ConfidenceProposer

PROMPT = list(b"Q: 2+2=?\nA:")


@functools.cache
def exact_target(family: str) -> DLMTarget:
    return load_dlm_target(f"tiny-random:{family}").exact()


def test_registry_names_and_unknown_name():
    assert {"oracle", "confidence", "confidence-branch"} <= set(PROPOSERS)
    with pytest.raises(UserError, match="unknown proposer"):
        build_proposer("spot-v9", None, None)


@pytest.mark.parametrize("family", ["llada", "sdar"])
@pytest.mark.parametrize("budget", [1, 3, 7, 16])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_oracle_commits_budget_plus_one_or_the_rest_of_the_block(family, budget, temperature):
    target = exact_target(family)
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 24, 8, temperature, 2)
    plain = plain_decode(target, PROMPT, cfg)
    spec = speculative_decode(target, PROMPT, build_proposer("oracle", target, plain), cfg, budget)
    assert spec.steps == plain.steps
    expected = []
    for block in plain.blocks(target.mask_id):
        left = block.end - block.first
        while left:
            expected.append(min(budget + 1, left))
            left -= expected[-1]
    assert spec.pass_commits == expected
    assert spec.metrics.accepted_per_depth == [sum(c > d + 1 for c in expected) for d in range(budget)]


def request(target: DLMTarget, budget: int, temperature: float) -> DraftRequest:
    rule = parse_rule("top1", target.family, target.mask_id)
    root = torch.full((8,), target.mask_id)
    root[2] = 65
    stale = target.start(PROMPT, 8, 8).forward(root[None]).current[0]
    noise = NoiseSource(0, 8, target.vocab_size) if temperature > 0 else None
    return DraftRequest(stale, root, 3, noise, rule, temperature, budget)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_confidence_chain_simulates_the_rule_on_the_stale_view(temperature):
    target = exact_target("dream")
    req = request(target, 16, temperature)
    tree = build_proposer("confidence", target, None).propose(req)
    assert [n.parent for n in tree.nodes] == list(range(6))  # 7 masks left: 6 nodes, then the bonus
    state = req.root
    for depth, node in enumerate(tree.nodes):
        noise = req.noise(req.step + depth) if req.noise else None
        assert node.transition == req.rule(req.stale, state, noise, temperature)
        state = node.transition.apply(state)
    short = build_proposer("confidence", target, None).propose(request(target, 2, temperature))
    assert short.nodes == tree.nodes[:2]


def test_confidence_branch_adds_runner_up_siblings_within_budget() -> None:
    target = exact_target("llada")
    req = request(target, 6, 0.0)
    tree = ConfidenceProposer(branch=True).propose(req)  # the registry's confidence-branch
    chain = ConfidenceProposer().propose(req)  # and confidence
    assert len(tree.nodes) == 6
    by_parent: dict[int, list] = {}
    for node in tree.nodes:
        by_parent.setdefault(node.parent, []).append(node.transition)
    assert len(by_parent[0]) == 2  # the runner-up and the chain's first node share the root
    runner_up, first = by_parent[0]
    assert first == chain.nodes[0].transition and runner_up.positions != first.positions
    assert sum(len(children) == 2 for children in by_parent.values()) == 6 // 3


@pytest.mark.parametrize("name", ["confidence", "confidence-branch"])
def test_confidence_proposers_draft_nothing_without_a_stale_view(name):
    target = exact_target("sdar")
    req = request(target, 8, 0.0)
    blind = DraftRequest(None, req.root, req.step, req.noise, req.rule, req.temperature, req.budget)
    assert build_proposer(name, target, None).propose(blind).nodes == ()


@pytest.mark.parametrize("family", ["llada", "sdar"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_oracle_order_drafts_the_true_positions_with_the_stale_tokens(family, temperature):
    from harness.decoding import DraftRequest, NoiseSource
    from harness.decoding.rules import candidate_tokens

    target = exact_target(family)
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, temperature, 2)
    plain = plain_decode(target, PROMPT, cfg, keep_logits=True)
    proposer = build_proposer("oracle-order", target, plain)
    noise = NoiseSource(2, 8, target.vocab_size) if temperature > 0 else None
    state = plain.steps[0].apply(torch.full((8,), target.mask_id))
    request = DraftRequest(plain.pass_logits[0], state, 1, noise, cfg.rule, temperature, 4)
    tree = proposer.propose(request)
    assert [n.parent for n in tree.nodes] == [0, 1, 2, 3]
    for depth, node in enumerate(tree.nodes):
        truth = plain.steps[1 + depth]
        tokens = candidate_tokens(request.stale, noise(1 + depth) if noise else None, temperature, target.mask_id)
        assert node.transition.positions == truth.positions
        assert node.transition.tokens == tuple(int(tokens[p]) for p in truth.positions)
    assert proposer.propose(DraftRequest(None, state, 1, noise, cfg.rule, temperature, 4)).nodes == ()

"""SPOT-Sets: lossless whatever the network says, a silent network drafts the confidence-set chain
first, children come out best first; checkpoints and calibrations: test_checkpoints.py."""

from __future__ import annotations

import functools
import itertools
import json
import math
import random

import pytest
import torch

from harness.decoding import (
    DecodeConfig,
    DraftRequest,
    NoiseSource,
    parse_rule,
    plain_decode,
    prepare,
    speculative_decode,
)
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers.baselines.confidence import ConfidenceProposer
from proposers.spot.features import TOP
from proposers.spot.network import SpotConfig
from proposers.spot_sets.network import (
    CALIBRATION_FILE,
    Calibration,
    SpotSetsNet,
    load_calibration,
    load_spot_sets,
    read_meta,
    rule_inputs,
    save_spot_sets,
    threshold_tau,
)
from proposers.spot_sets.tree import OUT, Children, SpotSetsProposer, grow

PROMPTS = [list(b"Q: 2+2=?\nA:"), list(b"The quick brown fox")]


@functools.cache
def exact_target(family: str) -> DLMTarget:
    return load_dlm_target(f"tiny-random:{family}").exact()


@functools.cache
def silent_net() -> SpotSetsNet:
    """Zero heads: argmax by confidence, commit by the stale view's threshold, the candidate token."""
    net = SpotSetsNet(SpotConfig()).eval()
    for module in (net.head, net.commit_head, net.token_head):
        torch.nn.init.zeros_(module.weight)
        torch.nn.init.zeros_(module.bias)
    with torch.no_grad():
        net.token_head.bias[TOP] = 5.0
    return net


@functools.cache
def median_tau(family: str, temperature: float, prompt: int, seed: int) -> float:
    """A tau at the median confidence of a plain top1 decode's decisions: steps then commit sets of
    several positions and single ones (a random target's confidences are far below 0.9)."""
    target = exact_target(family)
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, temperature, seed)
    plain = plain_decode(target, PROMPTS[prompt], cfg, keep_logits=True)
    assert plain.pass_logits is not None
    tempered = temperature if temperature > 0 and cfg.rule.confidence == "tempered_prob" else 1.0
    confidences = [
        float((logits.double() / tempered).softmax(-1)[t.positions[0], t.tokens[0]])
        for logits, t in zip(plain.pass_logits, plain.steps)
    ]
    return sorted(confidences)[len(confidences) // 2]


def threshold_config(family: str, temperature: float, prompt: int, seed: int) -> DecodeConfig:
    target = exact_target(family)
    rule = parse_rule(f"threshold:{median_tau(family, temperature, prompt, seed)!r}", target.family, target.mask_id)
    return DecodeConfig(rule, 16, 8, temperature, seed)


@pytest.mark.parametrize("family", ["sdar", "llada", "dream"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [3, 16])
@pytest.mark.parametrize("seed", [0, 7])
def test_speculative_equals_plain_in_exactness_mode(family, temperature, budget, seed, random_net):
    target = exact_target(family)
    prompt = PROMPTS[seed % 2]
    cfg = threshold_config(family, temperature, seed % 2, seed)
    reference = plain_decode(target, prompt, cfg)
    spec = speculative_decode(target, prompt, SpotSetsProposer(random_net(seed)), cfg, budget)
    assert check_lossless(reference, spec, near_tie_tolerance(torch.float64)).exact
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    assert spec.metrics.nfe <= reference.metrics.nfe and spec.metrics.draft_nodes > 0
    assert max(len(t.positions) for t in reference.steps) > 1  # the rule did commit sets


def request(target: DLMTarget, temperature: float, budget: int, tau: float, committed: int = 2) -> DraftRequest:
    """A stale view whose confidences spread over (0, 1): sets of several positions are likely."""
    logits = torch.randn(8, target.vocab_size, generator=torch.Generator().manual_seed(3)) * 4
    root = torch.full((8,), target.mask_id)
    root[:committed] = 5
    noise = NoiseSource(1, 8, target.vocab_size) if temperature > 0 else None
    rule = parse_rule(f"threshold:{tau}", target.family, target.mask_id)
    return DraftRequest(logits, root, 4, noise, rule, temperature, budget, tuple(range(committed)))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [1, 5, 12])
def test_trees_are_valid_within_budget_and_never_fill_the_block(temperature, budget, random_net):
    target = exact_target("sdar")
    req = request(target, temperature, budget, tau=0.3)
    for lookahead in (1, 3):
        tree = SpotSetsProposer(random_net(), lookahead=lookahead).propose(req)
        assert len(tree.nodes) == budget
        prepared = prepare(tree, req.root, target.mask_id, budget)
        assert prepared.states.shape[0] == budget + 1  # nothing invalid, duplicated or block-completing
    assert any(len(node.transition.positions) > 1 for node in tree.nodes)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_silent_network_drafts_the_confidence_set_transition_first(temperature):
    # The commit residual is the stale view's own threshold decision and the argmax head ranks by
    # confidence, so at every state of the confidence-set chain the most probable child (budget 1)
    # is the chain's next transition: an untrained network starts from the baseline.
    target = exact_target("sdar")
    req = request(target, temperature, 12, tau=0.3, committed=0)
    chain = [node.transition for node in ConfidenceProposer().propose(req).nodes]
    assert len(chain) >= 2 and len(chain[0].positions) > 1
    root, history = req.root, req.history
    for depth, transition in enumerate(chain):
        at = DraftRequest(req.stale, root, req.step + depth, req.noise, req.rule, temperature, 1, history)
        assert SpotSetsProposer(silent_net()).propose(at).nodes[0].transition == transition
        root, history = transition.apply(root), history + transition.positions
    tree = SpotSetsProposer(silent_net()).propose(req)
    assert tree.nodes[0].transition == chain[0] and len(tree.nodes) == 12


def brute_force(children: Children) -> list[float]:
    return sorted(
        (
            sum(children.variables[v][r][0] - children.variables[v][0][0] for v, r in enumerate(ranks))
            for ranks in itertools.product(*(range(len(v)) for v in children.variables))
        ),
        reverse=True,
    )


def enumerate_all(children: Children) -> list[float]:
    """The lazy enumeration run to the end, as the frontier runs it (costs as negative scores)."""
    import heapq

    frontier, out, counter = [(0.0, 0, (0,) * len(children.variables), -1)], [], 0
    while frontier:
        cost, _, ranks, last = heapq.heappop(frontier)
        out.append(-cost)
        for step, following, changed in children.successors(ranks, last):
            counter += 1
            heapq.heappush(frontier, (cost + step, counter, following, changed))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_children_come_out_best_first_each_once(seed):
    rng = random.Random(seed)
    variables = []
    for position in range(rng.randint(1, 4)):
        options = sorted([(rng.uniform(-6, 0), position, c) for c in range(rng.randint(2, 4))], key=lambda o: -o[0])
        variables.append(options)
    variables.sort(key=lambda options: options[0][0] - options[1][0])
    children = Children(0, 0, variables, 0.0)
    got = enumerate_all(children)
    assert got == sorted(got, reverse=True)
    assert len(got) == math.prod(len(v) for v in variables)
    assert got == pytest.approx(brute_force(children))


def test_unsorted_variables_break_the_order():
    # Negative control: the enumeration is best first only with variables sorted by their first
    # alternative's cost.
    variables = [[(0.0, 0, TOP), (-5.0, 0, OUT)], [(0.0, 1, TOP), (-1.0, 1, OUT)]]
    got = enumerate_all(Children(0, 0, variables, 0.0))
    assert got != sorted(got, reverse=True)
    assert sorted(got) == sorted(brute_force(Children(0, 0, variables, 0.0)))


def test_top1_and_non_probability_confidence_fall_back_to_the_confidence_chain(random_net):
    target = exact_target("sdar")
    req = request(target, 1.0, 6, tau=0.3)
    top1 = DraftRequest(
        req.stale, req.root, req.step, req.noise, parse_rule("top1", target.family, target.mask_id), 1.0, 6, req.history
    )
    assert SpotSetsProposer(random_net()).propose(top1) == ConfidenceProposer().propose(top1)
    assert SpotSetsProposer(random_net()).propose(req) != ConfidenceProposer().propose(req)
    assert SpotSetsProposer(random_net()).propose(DraftRequest(None, req.root, 0, None, req.rule, 0.0, 8)).nodes == ()


def test_calibration_blends_the_network_with_the_stale_rule():
    position = torch.tensor([[-0.1, -3.0, -math.inf]]).log_softmax(-1)
    commit = torch.tensor([[2.0, -1.0, 0.0]])
    token = torch.tensor([[[-2.0, -0.5, -1.5]] * 3]).log_softmax(-1)
    gap, odds_gap = torch.tensor([[-2.0, 0.0, 0.0]]), torch.tensor([[1.0, -1.0, 0.5]])
    same = Calibration().apply(position, commit, token, gap, odds_gap)
    assert torch.allclose(same[0], position) and torch.equal(same[1], commit) and torch.allclose(same[2], token)
    flat, scaled, _ = Calibration(2.0, -1.0, 0.0, 2.0, 0.0).apply(position, commit, token, gap, odds_gap)
    assert torch.equal(scaled, torch.tensor([[3.0, -3.0, -1.0]]))
    assert flat[0, 1] > position[0, 1] and flat[0, 2] == -math.inf
    assert torch.isclose(flat.exp().sum(), torch.tensor(1.0))
    # large rule weights hand the argmax to the stale view's most confident position, the commit
    # decision to its threshold and the token to the candidate (TOP)
    ruled, decided, tops = Calibration(1e-3, 0.0, 50.0, 1e3, 50.0, 1e3, 50.0).apply(
        position, commit, token, gap, odds_gap
    )
    assert int(ruled.argmax()) == 1 and (decided > 0).tolist() == [[True, False, True]]
    assert (tops.argmax(-1) == TOP).all() and torch.allclose(tops.exp().sum(-1), torch.ones(1, 3))


def test_rule_inputs_are_the_residuals_the_network_reads():
    candidate = torch.zeros(1, 3, 7)
    candidate[0, :, 0] = torch.tensor([-0.5, -0.1, -0.01])  # log-confidence
    candidate[0, :, 3] = torch.tensor([0.0, 3.0, 5.0])  # log-odds
    gap, odds_gap = rule_inputs(candidate, torch.tensor([[-1, -1, 0]]), torch.tensor([0.9]))
    assert gap.tolist()[0] == pytest.approx([-0.4, 0.0, 0.0])  # the committed third position is not the best
    assert odds_gap.tolist()[0] == pytest.approx([-math.log(9), 3 - math.log(9), 5 - math.log(9)], rel=1e-5)


def test_checkpoint_round_trip_with_a_calibration(tmp_path, random_net):
    net = random_net()
    save_spot_sets(net, tmp_path, {"provenance": {"target": "t", "rule": "threshold:0.9", "tau": 0.9}})
    loaded = load_spot_sets(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), loaded.state_dict().values()))
    assert read_meta(tmp_path)["provenance"]["tau"] == 0.9 and load_calibration(tmp_path) is None
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps({"calibration": {"commit_scale": 2.0}, "provenance": {}}))
    assert load_calibration(tmp_path) == Calibration(commit_scale=2.0)


def test_threshold_tau_reads_only_threshold_rules():
    assert threshold_tau("threshold:0.9") == 0.9 and threshold_tau("threshold:1") == 1.0
    assert [threshold_tau(text) for text in ("top1", "threshold:0", "threshold:1.5", "threshold:x")] == [None] * 4


def test_the_network_runs_on_any_block_length(random_net):
    net = random_net()
    for size in (4, 32, 96):
        ages = torch.full((2, size), -1)
        ages[1, 0] = 0
        position, commit, token = net(
            torch.rand(2, size, 11),
            torch.rand(2, size, 7),
            ages,
            torch.tensor([0, 3]),
            torch.zeros(2),
            torch.tensor([0.9, 0.5]),
        )
        assert position.shape == commit.shape == (2, size) and token.shape == (2, size, 3)
        assert torch.allclose(position.exp().sum(-1), torch.ones(2)) and position[1, 0] == -torch.inf


def test_grow_reports_its_calls_and_rows(random_net):
    target = exact_target("sdar")
    req = request(target, 0.0, 8, tau=0.3)
    one = grow(random_net(), None, req, 1)[1]
    three = grow(random_net(), None, req, 3)[1]
    assert one.calls == one.rows and three.rows >= three.calls and three.calls <= one.calls

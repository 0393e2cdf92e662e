"""SPOT: lossless whatever the network says, best-first trees within the budget, checkpoints."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random

import pytest
import torch

from harness.bundled import ZOO_DIR
from harness.decoding import (
    DecodeConfig,
    DraftRequest,
    NoiseSource,
    parse_rule,
    plain_decode,
    prepare,
    speculative_decode,
)
from harness.decoding.rules import candidate_tokens
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.registry import load_dlm_target, load_target
from harness.targets.target import DLMTarget
from proposers.baselines.confidence import ConfidenceProposer
from proposers.spot.features import (
    CANDIDATE_FEATURES,
    GAP_SCALE,
    LOG_FLOOR,
    MASKED,
    STATIC_FEATURES,
    TOP,
    StaleView,
    candidates,
    commit,
    log_odds,
    node_features,
    root_ages,
    static_features,
)
from proposers.spot.kernels import MIN_ROWS, encoder_layers
from proposers.spot.network import CONFIG_FILE, SpotConfig, SpotEnsemble, SpotNet, load_spot, save_spot, zoo_spot
from proposers.spot.tree import SpotProposer

PROMPTS = [list(b"Q: 2+2=?\nA:"), list(b"The quick brown fox")]


@functools.cache
def exact_target(family: str) -> DLMTarget:
    return load_dlm_target(f"tiny-random:{family}").exact()


@functools.cache
def random_net(seed: int = 0) -> SpotNet:
    torch.manual_seed(seed)
    return SpotNet(SpotConfig()).eval()


def test_parameter_count_is_about_the_papers():
    assert 0.55e6 < sum(p.numel() for p in random_net().parameters()) < 0.7e6


@pytest.mark.parametrize("family", ["sdar", "llada", "dream"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [3, 16])
@pytest.mark.parametrize("seed", [0, 7])
def test_speculative_equals_plain_in_exactness_mode(family, temperature, budget, seed):
    target = exact_target(family)
    prompt = PROMPTS[seed % 2]
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, temperature, seed)
    reference = plain_decode(target, prompt, cfg)
    spec = speculative_decode(target, prompt, SpotProposer(random_net(seed)), cfg, budget)
    assert check_lossless(reference, spec, near_tie_tolerance(torch.float64)).exact
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    assert spec.metrics.nfe <= reference.metrics.nfe and spec.metrics.draft_nodes > 0


def test_an_ensemble_is_the_mixture_of_its_members_joint_distributions_and_stays_lossless():
    target = exact_target("sdar")
    req = request(target, 1.0, 5)
    view = StaleView.of(req.stale, 1.0, target.mask_id)
    inputs = (
        static_features(view)[None],
        candidates(view, req.noise(req.step), req.rule).features[None],
        root_ages(req.root, target.mask_id, req.history, 16)[None],
        torch.tensor([0]),
        torch.tensor([1.0]),
    )
    members = [random_net(0), random_net(7)]
    position, token = SpotEnsemble(members)(*inputs)
    outputs = [(p.exp(), t.exp()) for p, t in (net(*inputs) for net in members)]
    assert torch.allclose(position.exp(), (outputs[0][0] + outputs[1][0]) / 2)
    joint = sum(p[..., None] * t for p, t in outputs) / 2  # in probabilities, by hand
    assert torch.allclose(position.exp()[..., None] * token.exp(), joint, atol=1e-7)
    assert not token.isnan().any() and torch.allclose(token.exp().sum(-1), torch.ones(1, 8))
    alone = SpotEnsemble(members[:1])(*inputs)
    assert all(torch.allclose(a, b) for a, b in zip(alone, members[0](*inputs)))
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, 1.0, 3)
    reference = plain_decode(target, PROMPTS[0], cfg)
    spec = speculative_decode(target, PROMPTS[0], SpotProposer(SpotEnsemble(members)), cfg, 6)
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    with pytest.raises(ValueError, match="share max_age"):
        SpotEnsemble([members[0], SpotNet(SpotConfig(max_age=4))])


def request(target: DLMTarget, temperature: float, budget: int, committed: int = 2) -> DraftRequest:
    logits = torch.randn(8, target.vocab_size, generator=torch.Generator().manual_seed(3))
    root = torch.full((8,), target.mask_id)
    root[:committed] = 5
    noise = NoiseSource(1, 8, target.vocab_size) if temperature > 0 else None
    rule = parse_rule("top1", target.family, target.mask_id)
    return DraftRequest(logits, root, 4, noise, rule, temperature, budget)


def drafted_nodes(tree, req: DraftRequest):
    """(position, token, the stale view's candidates at the node's depth) for every node of a tree."""
    assert req.stale is not None
    view = StaleView.of(req.stale, req.temperature, req.rule.mask_id)
    depth = {0: 0}
    for index, node in enumerate(tree.nodes, start=1):
        depth[index] = depth[node.parent] + 1
        (position,), (token,) = node.transition.positions, node.transition.tokens
        noise = req.noise(req.step + depth[node.parent]) if req.noise else None
        yield position, token, candidates(view, noise, req.rule)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [1, 5, 12])
def test_tree_is_best_first_within_budget_with_the_rules_candidates(temperature, budget):
    target = exact_target("sdar")
    req = request(target, temperature, budget)
    tree = SpotProposer(random_net()).propose(req)
    assert len(tree.nodes) == budget
    prepared = prepare(tree, req.root, target.mask_id, budget)
    assert prepared.states.shape[0] == budget + 1  # nothing invalid, duplicated or block-completing
    for position, token, drafted in drafted_nodes(tree, req):
        assert token in (int(drafted.tokens[position]), int(drafted.runner_up[position]), int(drafted.greedy[position]))
        if temperature == 0:
            assert torch.equal(drafted.greedy, drafted.tokens)  # a third token exists only under noise
    assert tree.nodes[0].parent == 0  # the most likely first commit comes first


def test_candidates_are_the_rules_and_the_runner_up_is_second_under_the_same_noise():
    target = exact_target("sdar")
    req = request(target, 1.0, 4)
    noise = req.noise(req.step)
    drafted = candidates(StaleView.of(req.stale, 1.0, target.mask_id), noise, req.rule)
    assert torch.equal(drafted.tokens, candidate_tokens(req.stale, noise, 1.0, target.mask_id))
    scores = req.stale.double() + noise.double()
    scores[:, target.mask_id] = -torch.inf
    second = scores.topk(2, -1)
    assert torch.equal(drafted.runner_up, second.indices[:, 1])
    assert torch.allclose(drafted.features[:, 5].double(), (second.values[:, 0] - second.values[:, 1]), atol=1e-5)
    runner_up_logp = req.stale.double().log_softmax(-1).gather(-1, second.indices[:, 1:2]).squeeze(1)
    assert req.rule.confidence == "prob"
    assert torch.allclose(drafted.features[:, 6].double(), runner_up_logp.clamp_min(LOG_FLOOR), atol=1e-5)


@pytest.mark.parametrize("token_logp", [(0.0, -30.0), (-30.0, 0.0)])
def test_the_token_head_picks_the_drafted_token(token_logp):
    # A token head sure of TOP drafts the rule's candidates; one sure of RUNNER_UP drafts runner-ups.
    target = exact_target("sdar")
    net = SpotNet(SpotConfig()).eval()
    torch.nn.init.zeros_(net.token_head.weight)
    with torch.no_grad():
        net.token_head.bias.copy_(torch.tensor([*token_logp, -30.0]))
    req = request(target, 0.0, 6)
    drafted = candidates(StaleView.of(req.stale, 0.0, target.mask_id), None, req.rule)
    expected = drafted.tokens if token_logp[TOP] == 0 else drafted.runner_up
    tree = SpotProposer(net).propose(req)
    assert len(tree.nodes) == 6
    assert all(n.transition.tokens[0] == int(expected[n.transition.positions[0]]) for n in tree.nodes)


def test_where_a_flip_is_as_likely_as_not_the_runner_up_is_drafted_beside_the_candidate():
    # Path probability is P(position) x P(token): with even odds on the token, the two siblings on
    # the most likely position outrank anything below either of them.
    target = exact_target("sdar")
    net = SpotNet(SpotConfig()).eval()
    for head in (net.head, net.token_head):
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
    with torch.no_grad():
        net.token_head.bias.copy_(torch.tensor([math.log(0.5), math.log(0.5), -30.0]))
    req = request(target, 1.0, 2)
    first = ConfidenceProposer().propose(req).nodes[0].transition
    drafted = candidates(StaleView.of(req.stale, 1.0, target.mask_id), req.noise(req.step), req.rule)
    (position,) = first.positions
    tree = SpotProposer(net).propose(req)
    assert [(n.parent, n.transition.positions[0], n.transition.tokens[0]) for n in tree.nodes] == [
        (0, position, int(drafted.tokens[position])),
        (0, position, int(drafted.runner_up[position])),
    ]


def test_where_the_head_expects_neither_candidate_the_greedy_token_is_drafted():
    # At T > 0 the greedy token (no noise) can be a third token; it is scored by a share of NEITHER.
    target = exact_target("sdar")
    net = SpotNet(SpotConfig()).eval()
    torch.nn.init.zeros_(net.token_head.weight)
    with torch.no_grad():
        net.token_head.bias.copy_(torch.tensor([-30.0, -30.0, 0.0]))
    req = request(target, 1.0, 6)
    tree = SpotProposer(net).propose(req)
    greedy_drafted = 0
    for position, token, drafted in drafted_nodes(tree, req):
        third = drafted.greedy_is_third(position)
        assert token == int(drafted.greedy[position]) or not third
        greedy_drafted += third
    assert len(tree.nodes) == 6 and greedy_drafted > 0


def test_log_odds_tells_near_certain_positions_apart():
    logp = torch.tensor([[0.995, 0.005], [0.994, 0.006], [0.5, 0.5]]).double().log()
    odds = log_odds(logp, torch.tensor([0, 0, 1]))
    assert torch.allclose(odds, torch.tensor([0.995 / 0.005, 0.994 / 0.006, 1.0]).double().log())
    assert float(odds[0] - odds[1]) > 0.15 > 100 * float(logp[0, 0] - logp[1, 0])


def test_ages_date_the_latest_real_commit_then_the_branch():
    root = torch.tensor([0, 9, 9, 0, 0, 9])  # mask id 0; positions 1, 2, 5 committed
    ages = root_ages(root, 0, (5, 1, 2), max_age=16)
    assert ages.tolist() == [MASKED, 16, 0, MASKED, MASKED, 16]  # only the latest real commit is dated
    assert commit(ages, 3).tolist() == [MASKED, 17, 1, 0, MASKED, 17]
    assert commit(commit(ages, 3), 0).tolist() == [0, 18, 2, 1, MASKED, 18]
    assert root_ages(root, 0, (), max_age=16).tolist() == [MASKED, 16, 16, MASKED, MASKED, 16]


def test_node_features_by_hand():
    # block of 6: position 1 committed before the root (age 1), position 3 on the branch (age 0)
    ages = torch.tensor([[MASKED, 1, MASKED, 0, MASKED, MASKED]])
    confidence = torch.tensor([[-0.5, 0.0, -0.1, 0.0, -3.0, -20.0]])
    odds = torch.tensor([[0.0, 5.0, 2.0, 5.0, -3.0, -25.0]])
    candidate = torch.stack([confidence, confidence, confidence, odds, torch.ones_like(confidence)], -1)
    f = node_features(candidate, ages, torch.tensor([1]))[0]
    gap, odds_gap, best, rank, fraction, left, right, leftmost, adjacent, latest, second, unseen = f.unbind(-1)
    masked = [0, 2, 4, 5]
    assert torch.allclose(gap[masked] * GAP_SCALE, torch.tensor([-0.4, 0.0, -2.9, -GAP_SCALE]))
    assert torch.allclose(odds_gap[masked] * GAP_SCALE, torch.tensor([-2.0, 0.0, -5.0, -GAP_SCALE]))
    assert gap[[1, 3]].tolist() == [0, 0] and odds_gap[[1, 3]].tolist() == [0, 0]
    assert best.tolist() == [0, 0, 1, 0, 0, 0]
    assert (rank[masked] * 7).round().tolist() == [1, 0, 2, 3]
    assert torch.allclose(fraction, torch.full((6,), 4 / 6))
    assert left.tolist() == [1, 0, 1, 0, 1, 0] and right.tolist() == [1, 0, 1, 0, 0, 0]
    assert leftmost.tolist() == [1, 0, 0, 0, 0, 0]
    assert adjacent.tolist() == [0, 0, 1, 0, 1, 0]
    assert (latest * 8).round().tolist() == [-3, -2, -1, 0, 1, 2]
    assert (second * 8).round().tolist() == [-1, 0, 1, 2, 3, 4]
    assert unseen.tolist() == [0, 1, 0, 1, 0, 0]  # both commits are newer than a view one pass deep
    at_root = node_features(candidate, ages, torch.tensor([0]))[0]
    assert at_root[:, 11].tolist() == [0, 0, 0, 1, 0, 0]
    nothing = node_features(candidate, torch.full((1, 6), MASKED), torch.tensor([0]))[0]
    assert nothing[:, 8:].abs().sum() == 0  # no commit yet: no offsets


def plain_node_features(candidate: torch.Tensor, ages: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """`node_features` feature by feature, one stacked tensor (its definition before it was written
    into one tensor for speed): the reference its values must equal bit for bit."""
    masked, committed = ages == MASKED, ages != MASKED
    score = candidate[..., 0].masked_fill(committed, -math.inf)
    rank = (score[..., None, :] > score[..., :, None]).sum(-1).clamp_max(7).masked_fill(committed, 7)
    positions = torch.arange(ages.shape[-1])

    def offset_to(marked):
        where = marked.float().argmax(-1, keepdim=True)
        return (positions - where).clamp(-8, 8) / 8 * marked.any(-1, keepdim=True)

    def gap(column):
        s = candidate[..., column].masked_fill(committed, -math.inf)
        return (s - s.max(-1, keepdim=True).values).nan_to_num(0.0).clamp_min(-GAP_SCALE).masked_fill(committed, 0.0)

    latest = offset_to(ages == 0)
    return torch.stack(
        [
            gap(0) / GAP_SCALE,
            gap(3) / GAP_SCALE,
            (rank == 0).float(),
            rank / 7,
            masked.float().mean(-1, keepdim=True).expand_as(latest),
            torch.nn.functional.pad(committed, (1, 0), value=True)[..., :-1].float(),
            torch.nn.functional.pad(committed, (0, 1), value=False)[..., 1:].float(),
            (masked & (masked.cumsum(-1) == 1)).float(),
            (latest.abs() * 8 == 1).float(),
            latest,
            offset_to(ages == 1),
            (committed & (ages <= depth[:, None])).float(),
        ],
        -1,
    )


def random_nodes(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random candidate features (some tied, some at the floor), ages of a random branch and depths."""
    rng = random.Random(seed)
    n, size = rng.randint(1, 6), rng.choice([1, 2, 3, 4, 5, 8, 16, 32])
    candidate = torch.randn(n, size, CANDIDATE_FEATURES, generator=torch.Generator().manual_seed(seed))
    candidate = candidate.round() if seed % 3 == 0 else candidate * rng.choice([0.1, 1.0, 10.0])
    candidate[:, : seed % 3, 0] = LOG_FLOOR
    ages = torch.full((n, size), MASKED)
    for row in range(n):
        for age, position in enumerate(rng.sample(range(size), rng.randint(0, size))):
            ages[row, position] = age if rng.random() < 0.7 else 16
    return candidate, ages, torch.tensor([rng.randint(0, 16) for _ in range(n)])


def test_node_features_equal_the_plain_definition_bit_for_bit():
    for seed in range(300):
        candidate, ages, depth = random_nodes(seed)
        expected = plain_node_features(candidate, ages, depth).view(torch.int32)
        assert torch.equal(node_features(candidate, ages, depth).view(torch.int32), expected), f"seed {seed}"
    # Negative control: the comparison sees a one-ulp change of an input.
    candidate = torch.tensor([[0.0, -1.0, -2.0, -3.0]])[..., None].expand(1, 4, CANDIDATE_FEATURES).clone()
    ages, depth = torch.full((1, 4), MASKED), torch.tensor([0])
    expected = plain_node_features(candidate, ages, depth).view(torch.int32)
    candidate[0, 1, 0] = torch.nextafter(candidate[0, 1, 0], torch.tensor(0.0))
    assert not torch.equal(node_features(candidate, ages, depth).view(torch.int32), expected)


@pytest.mark.parametrize("name", ["random", "zoo", "ensemble"])
def test_the_searchs_forward_is_the_module_forward_bit_for_bit(name):
    # SpotNet in inference calls the encoder's fused kernels itself, and with `masked_only` skips
    # the last layer's rows of committed positions; what the search reads (positions everywhere,
    # tokens where masked) must be what the training-time module computes, on every shape.
    net = {"random": random_net(), "zoo": zoo_spot(), "ensemble": SpotEnsemble([random_net(1), random_net(2)])}[name]
    skipped = 0
    for seed in range(60):
        candidate, ages, depth = random_nodes(seed)
        n, size = ages.shape
        inputs = (torch.rand(1, size, STATIC_FEATURES).expand(n, -1, -1), candidate, ages, depth, torch.rand(n))
        with torch.no_grad():
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                expected = net(*inputs)  # nn.TransformerEncoder's layer by layer path
            finally:
                torch.backends.mha.set_fastpath_enabled(True)
            module = (net.nets[0] if name == "ensemble" else net).encoder
            h = torch.randn(n, size, module.layers[0].linear1.in_features)
            assert torch.equal(module(h), encoder_layers(module, h))
        with torch.inference_mode():
            full, masked_only = net(*inputs), net(*inputs, masked_only=True)
        masked = ages == MASKED
        assert torch.allclose(full[0], expected[0], atol=1e-5, equal_nan=True)
        bits = [
            (position.view(torch.int32), token[masked].view(torch.int32)) for position, token in (full, masked_only)
        ]
        assert torch.equal(bits[0][0], bits[1][0]) and torch.equal(bits[0][1], bits[1][1])
        skipped += int(masked.sum()) >= MIN_ROWS and not masked.all()
    assert skipped > 10


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_with_a_silent_head_spot_ranks_like_the_rule(temperature):
    # The output is the network's score plus the log-confidence gap: with a zero head, the most
    # likely next commit at every node of the confidence chain is the one the rule simulates.
    target = exact_target("sdar")
    net = SpotNet(SpotConfig()).eval()
    torch.nn.init.zeros_(net.head.weight)
    torch.nn.init.zeros_(net.head.bias)
    req = request(target, temperature, 5, committed=2)
    chain = ConfidenceProposer().propose(req)
    ages = root_ages(req.root, target.mask_id, req.history, net.config.max_age)
    static = static_features(StaleView.of(req.stale, temperature, target.mask_id))[None]
    for depth, node in enumerate(chain.nodes):
        noise = req.noise(req.step + depth) if req.noise else None
        view = StaleView.of(req.stale, temperature, target.mask_id)
        features = candidates(view, noise, req.rule).features[None]
        with torch.no_grad():
            logp = net(static, features, ages[None], torch.tensor([depth]), torch.tensor([temperature]))[0][0]
        (position,) = node.transition.positions
        assert int(logp.argmax()) == position
        ages = commit(ages, position)
    assert len(chain.nodes) == 5


def test_threshold_rules_and_non_probability_confidence_fall_back_to_the_confidence_chain():
    target = exact_target("sdar")
    req = request(target, 1.0, 6)
    threshold = dataclasses.replace(req, rule=parse_rule("threshold:0.01", target.family, target.mask_id))
    margin = dataclasses.replace(req, rule=dataclasses.replace(req.rule, confidence="margin"))
    for fallback in (threshold, margin):
        assert SpotProposer(random_net()).propose(fallback) == ConfidenceProposer().propose(fallback)
    assert SpotProposer(random_net()).propose(req) != ConfidenceProposer().propose(req)


def test_the_network_runs_on_any_block_length():
    net = random_net()
    for size in (4, 32, 96):
        ages = torch.full((2, size), MASKED)
        ages[1, 0] = 0
        static, candidate = torch.rand(2, size, STATIC_FEATURES), torch.rand(2, size, CANDIDATE_FEATURES)
        logp, token_logp = net(static, candidate, ages, torch.tensor([0, 3]), torch.zeros(2))
        assert logp.shape == (2, size) and torch.allclose(logp.exp().sum(-1), torch.ones(2))
        assert logp[1, 0] == -torch.inf
        assert token_logp.shape == (2, size, 3) and torch.allclose(token_logp.exp().sum(-1), torch.ones(2, size))


def test_no_stale_view_no_draft_and_a_full_block_is_not_drafted():
    target = exact_target("sdar")
    req = request(target, 0.0, 8)
    proposer = SpotProposer(random_net())
    assert proposer.propose(DraftRequest(None, req.root, 0, None, req.rule, 0.0, 8)).nodes == ()
    last_mask = request(target, 0.0, 8, committed=7)
    assert proposer.propose(last_mask).nodes == ()


def test_checkpoint_round_trip(tmp_path):
    net = random_net(5)
    save_spot(net, tmp_path, {"target": "none"})
    loaded = load_spot(tmp_path)
    target = exact_target("sdar")
    req = request(target, 1.0, 10)
    assert SpotProposer(loaded).propose(req) == SpotProposer(net).propose(req)
    assert SpotProposer(random_net(6)).propose(req) != SpotProposer(net).propose(req)


def test_registry_spot_is_the_zoo_checkpoint_trained_on_sdar_a():
    from proposers import build_proposer
    from proposers.spot.network import DEFAULT_CHECKPOINT, zoo_spot

    proposer = build_proposer("spot", None, None)
    by_path = build_proposer(f"spot:{ZOO_DIR / 'proposers' / DEFAULT_CHECKPOINT}", None, None)
    by_name = build_proposer(f"spot:{DEFAULT_CHECKPOINT}", None, None)
    assert isinstance(proposer, SpotProposer) and proposer.net is by_path.net is by_name.net  # loaded once
    zoo = zoo_spot().state_dict()
    assert all(torch.equal(value, zoo[key]) for key, value in proposer.net.state_dict().items())
    meta = json.loads((ZOO_DIR / "proposers" / DEFAULT_CHECKPOINT / CONFIG_FILE).read_text())
    assert meta["provenance"]["target"] == "sdar-a" and meta["validation"]["accuracy"] > 0.5


@pytest.mark.parametrize("name", ["sdar-a", "llada-a"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_trained_spot_on_zoo_targets_is_exact_and_accepts_drafts(name, temperature):
    from proposers.spot.network import zoo_spot

    target = load_target(name).exact()
    prompt = target.tokenizer.encode(
        "Question: Tom has 3 apples and buys 4 more. How many?\nAnswer:", add_special_tokens=False
    )
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 32, 32, temperature, 1)
    reference = plain_decode(target, prompt, cfg)
    spec = speculative_decode(target, prompt, SpotProposer(zoo_spot()), cfg, 8)
    assert check_lossless(reference, spec, near_tie_tolerance(torch.float64)).exact
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    assert spec.metrics.nfe < reference.metrics.nfe

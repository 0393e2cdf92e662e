"""The exactness claim, property-tested: speculative decoding reproduces plain decoding token for
token in exactness mode, for every family, seed, temperature, rule, budget and proposer."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis import target as target_score

from harness.decoding import DecodeConfig, DraftTree, Generation, gumbel, parse_rule, plain_decode, speculative_decode
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer
from proposers.registry import proposers_for
from proposers.spot_sets.family import spot_sets_folder, spot_sets_net
from proposers.spot_sets.network import Calibration
from proposers.spot_sets.tree import SpotSetsProposer

FAMILIES = ["llada", "dream", "sdar", "llada2", "converted"]
PROMPTS = [list(b"Q: 2+2=?\nA:"), list(b"hi"), list(b"The quick brown fox")]
GEOMETRIES = [(16, 8), (24, 8), (16, 4)]


@functools.cache
def exact_target(family: str) -> DLMTarget:
    return load_dlm_target(f"tiny-random:{family}").exact()


@functools.cache
def rule_text(family: str, kind: str, temperature: float) -> str:
    """top1, or a threshold at the median confidence of one block's top1 decisions at this
    temperature, so that transitions of several positions occur."""
    if kind == "top1":
        return "top1"
    target = exact_target(family)
    rule = parse_rule("top1", target.family, target.mask_id)
    tempered = temperature if temperature > 0 and rule.confidence == "tempered_prob" else 1.0
    state = torch.full((8,), target.mask_id)
    logits = target.start(PROMPTS[0], 8, 8).forward(state[None]).current[0]
    confidences = []
    for step in range(8):
        noise = gumbel(0, step, 8, target.vocab_size) if temperature > 0 else None
        transition = rule(logits, state, noise, temperature)
        probs = (logits[transition.positions[0]].double() / tempered).softmax(-1)
        confidences.append(probs[transition.tokens[0]].item())
        state = transition.apply(state)
    return f"threshold:{sorted(confidences)[4]!r}"


def config(family: str, kind: str, temperature: float, seed: int, geometry: tuple[int, int]) -> DecodeConfig:
    target = exact_target(family)
    rule = parse_rule(rule_text(family, kind, temperature), target.family, target.mask_id)
    return DecodeConfig(rule, geometry[0], geometry[1], temperature, seed)


@functools.cache
def plain(family: str, prompt: int, kind: str, temperature: float, seed: int, geometry: tuple[int, int]) -> Generation:
    cfg = config(family, kind, temperature, seed, geometry)
    return plain_decode(exact_target(family), PROMPTS[prompt], cfg)


def block_ends(generation: Generation, mask_id: int) -> list[int]:
    """For each step, the index of the step that completes its block."""
    return [block.end - 1 for block in generation.blocks(mask_id) for _ in range(block.first, block.end)]


def check_accounting(spec: Generation) -> None:
    m = spec.metrics
    assert sum(spec.pass_commits) == m.commits == len(spec.steps)
    assert len(spec.pass_commits) == m.nfe and min(spec.pass_commits) >= 1
    assert sum(m.accepted_per_depth) == m.commits - m.nfe
    assert m.rows == m.nfe + m.draft_nodes
    assert m.mean_accept_len == m.commits / m.nfe
    assert 0 <= m.target_s + m.proposer_s <= m.wall_s


@settings(max_examples=200, deadline=None)
@given(
    family=st.sampled_from(FAMILIES),
    prompt=st.integers(0, len(PROMPTS) - 1),
    seed=st.integers(0, 2**32),
    temperature=st.sampled_from([0.0, 0.7, 1.0]),
    kind=st.sampled_from(["top1", "threshold"]),
    budget=st.integers(0, 16),
    proposer=st.sampled_from(sorted(proposers_for("dlm"))),
    geometry=st.sampled_from(GEOMETRIES),
)
def test_speculative_equals_plain_in_exactness_mode(
    family, prompt, seed, temperature, kind, budget, proposer, geometry
):
    target = exact_target(family)
    reference = plain(family, prompt, kind, temperature, seed, geometry)
    cfg = config(family, kind, temperature, seed, geometry)
    draft = build_proposer(proposer, target, reference)
    spec = speculative_decode(target, PROMPTS[prompt], draft, cfg, budget)
    report = check_lossless(reference, spec, near_tie_tolerance(torch.float64))
    assert report.exact, report
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    check_accounting(spec)
    assert spec.metrics.nfe <= reference.metrics.nfe
    if proposer == "oracle":
        ends = block_ends(reference, target.mask_id)
        pass_start = 0
        for commits in spec.pass_commits:
            assert commits == min(budget + 1, ends[pass_start] - pass_start + 1)
            pass_start += commits


CALIBRATED = Calibration(
    commit_scale=0.5,
    commit_bias=-0.3,
    commit_rule_weight=0.5,
    position_temperature=2.0,
    position_rule_weight=0.4,
    token_temperature=1.6,
    top_bias=0.5,
)
"""A calibration as far from the identity as the fitted ones
(zoo/proposers/spot-sets-calibrated/*/calibration.json), so the calibrated path runs."""


def fitted_proposer(proposer: str, calibrated: bool, target: DLMTarget, reference: Generation):
    if proposer == "spot-sets" and calibrated:
        return SpotSetsProposer(spot_sets_net(spot_sets_folder(None)), CALIBRATED)
    return build_proposer(proposer, target, reference)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    family=st.sampled_from(FAMILIES),
    prompt=st.integers(0, len(PROMPTS) - 1),
    seed=st.integers(0, 2**32),
    temperature=st.sampled_from([0.0, 0.7, 1.0]),
    budget=st.integers(1, 16),
    geometry=st.sampled_from(GEOMETRIES),
    calibrated=st.booleans(),
)
@pytest.mark.parametrize("proposer, kind", [("spiffy", "top1"), ("spiffy", "threshold"), ("spot-sets", "threshold")])
def test_fitted_proposers_are_exact_under_the_rules_they_run_under(
    proposer, kind, family, prompt, seed, temperature, budget, geometry, calibrated
):
    """The registry property above samples every proposer; this one gives each fitted proposer (a
    Spiffy graph, SPOT-Sets with and without a calibration) examples under each rule a run lets it
    run under (SPOT-Sets: threshold only), with a budget that drafts."""
    target = exact_target(family)
    reference = plain(family, prompt, kind, temperature, seed, geometry)
    cfg = config(family, kind, temperature, seed, geometry)
    spec = speculative_decode(
        target, PROMPTS[prompt], fitted_proposer(proposer, calibrated, target, reference), cfg, budget
    )
    report = check_lossless(reference, spec, near_tie_tolerance(torch.float64))
    assert report.exact, report
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    check_accounting(spec)
    assert spec.metrics.nfe <= reference.metrics.nfe
    target_score(spec.metrics.draft_nodes)  # steer the search to examples where the proposer drafts much


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("kind", ["top1", "threshold"])
def test_budget_zero_is_plain_decoding_with_the_same_nfe(family, temperature, kind):
    target = exact_target(family)
    reference = plain(family, 0, kind, temperature, 11, (16, 8))
    cfg = config(family, kind, temperature, 11, (16, 8))
    spec = speculative_decode(target, PROMPTS[0], build_proposer("confidence", target, reference), cfg, 0)
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    assert spec.metrics.nfe == reference.metrics.nfe == spec.metrics.rows
    assert spec.metrics.accepted_per_depth == [] and spec.pass_commits == [1] * len(spec.steps)


class Recorder:
    """Drafts nothing; remembers what each request showed."""

    def __init__(self):
        self.requests = []

    def propose(self, request):
        self.requests.append(request)
        return DraftTree()


@pytest.mark.parametrize("family", FAMILIES)
def test_stale_view_across_block_boundaries(family):
    """Full-attention targets hand the next block's logits over as its first stale view;
    block-causal ones have none (their first pass of a block is also its KV-store pass)."""
    target = exact_target(family)
    recorder = Recorder()
    cfg = config(family, "top1", 0.0, 0, (16, 8))
    spec = speculative_decode(target, PROMPTS[0], recorder, cfg, 4)
    stale = [r.stale for r in recorder.requests]
    starts = [block.first for block in spec.blocks(target.mask_id)]
    assert [r.step for r in recorder.requests] == list(range(len(spec.steps))) and len(starts) > 1
    assert stale[0] is None
    for step in range(1, len(stale)):
        if step in starts and target.family.caches_finished_blocks:
            assert stale[step] is None
        else:
            assert stale[step].shape == (8, target.vocab_size)
    # with nothing drafted, the stale view of pass k + 1 is the plain decoder's logits at step k
    session = target.start(PROMPTS[0], 16, 8)
    state = session.first_state()
    for step in range(3):
        logits = session.forward(state[None]).current[0]
        assert torch.equal(logits, stale[step + 1])
        state = spec.steps[step].apply(state)


class RecordingChain(Recorder):
    """Drafts the confidence chain, so passes commit several transitions; remembers the requests."""

    def propose(self, request):
        self.requests.append(request)
        return build_proposer("confidence", None, None).propose(request)


@pytest.mark.parametrize("family", ["llada", "sdar"])
@pytest.mark.parametrize("kind", ["top1", "threshold"])
def test_history_is_the_blocks_commit_order_so_far(family, kind) -> None:
    target = exact_target(family)
    recorder = RecordingChain()
    cfg = config(family, kind, 1.0, 0, (16, 8))
    spec = speculative_decode(target, PROMPTS[0], recorder, cfg, 4)
    expected, prompt_tail = {}, {}  # per step: the block's commits so far, and its prompt positions
    for block in spec.blocks(target.mask_id):
        history: list[int] = []
        for step in range(block.first, block.end):
            expected[step] = tuple(history)
            prompt_tail[step] = (block.start != target.mask_id).nonzero().squeeze(1).tolist()
            history += list(spec.steps[step].positions)
    assert max(spec.pass_commits) > 1 and len(recorder.requests) == len(spec.pass_commits)
    assert bool(prompt_tail[0]) == target.family.caches_finished_blocks  # the prompt ends mid-block
    for request in recorder.requests:
        assert request.history == expected[request.step]
        committed = (request.root != target.mask_id).nonzero().squeeze(1).tolist()
        assert sorted(list(request.history) + prompt_tail[request.step]) == committed


@pytest.mark.parametrize("family", ["llada", "sdar"])
def test_generation_stops_after_the_first_block_with_an_eos(family):
    base = exact_target(family)
    reference = plain(family, 0, "top1", 1.0, 3, (24, 8))
    ends = list(itertools.accumulate(int((b.start == base.mask_id).sum()) for b in reference.blocks(base.mask_id)))
    eos = int(reference.tokens[ends[0] + 3])  # a token committed in the second block
    target = DLMTarget(base.model, base.family, base.mask_id, eos, base.tokenizer, rowwise=True)
    cfg = config(family, "top1", 1.0, 3, (24, 8))
    first_block = 0 if eos in reference.tokens[: ends[0]].tolist() else 1
    for generation in (
        plain_decode(target, PROMPTS[0], cfg),
        speculative_decode(target, PROMPTS[0], build_proposer("oracle", target, reference), cfg, 6),
    ):
        assert generation.tokens.numel() == ends[first_block] < len(reference.tokens)
        ids = generation.tokens.tolist()
        assert generation.answer_ids == ids[: ids.index(eos)]
        assert generation.steps == reference.steps[: len(generation.steps)]

"""Autoregressive decoding: plain equals transformers' greedy generate, and speculative equals plain
token for token in exactness mode for every proposer, tree, budget, seed and temperature; negative
controls (wrong noise position, rejected keys/values kept) are caught."""

from __future__ import annotations

import functools
import random
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.decoding import DraftNode, DraftTree, Generation, Transition
from harness.decoding import autoregressive as ar
from harness.decoding.autoregressive import ARConfig, ARDraftRequest, ar_decode, ar_plain_decode, prepare_ar
from harness.decoding.noise import NoiseSource, gumbel
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.ar import ARSession, ARTarget
from harness.targets.registry import load_ar_only, load_target
from proposers import build_proposer
from proposers.registry import proposers_for

PROMPTS = [list(b"The quick brown fox jumps over the lazy dog. The quick brown"), list(b"hi"), list(b"abcabcabcabc")]


@functools.cache
def target(exact: bool) -> ARTarget:
    base = load_ar_only("tiny-random-ar")
    return base.exact() if exact else base


@functools.cache
def plain(prompt: int, temperature: float, seed: int, length: int = 24, exact: bool = True) -> Generation:
    return ar_plain_decode(target(exact), PROMPTS[prompt], ARConfig(length, temperature, seed))


class RandomTree:
    """Drafts a random tree (any branching) whose tokens are the plain trajectory's with probability
    `hit` and random otherwise, so walks accept, branch and stop at every depth."""

    def __init__(self, truth: list[int], seed: int, hit: float = 0.7):
        self.truth, self.random, self.hit = truth, random.Random(seed), hit

    def propose(self, request: ARDraftRequest) -> DraftTree:
        done = request.context.numel() - request.prompt_length
        nodes, depths = [], [0]
        for j in range(request.budget + 2):  # over budget on purpose: the verifier truncates
            parent = self.random.randrange(j + 1)
            depth = depths[parent] + 1
            index = done + depth - 1
            token = (
                self.truth[index]
                if index < len(self.truth) and self.random.random() < self.hit
                else self.random.randrange(259)
            )
            nodes.append(DraftNode(parent, Transition((depth - 1,), (token,))))
            depths.append(depth)
        return DraftTree(tuple(nodes))


def check_accounting(spec: Generation) -> None:
    m = spec.metrics
    assert sum(spec.pass_commits) == m.commits == len(spec.steps) == spec.tokens.numel()
    assert len(spec.pass_commits) == m.nfe and min(spec.pass_commits) >= 1
    assert sum(m.accepted_per_depth) == m.commits - m.nfe
    assert m.rows == m.nfe + m.draft_nodes
    assert 0 <= m.target_s + m.proposer_s <= m.wall_s


@pytest.mark.parametrize("prompt", range(len(PROMPTS)))
def test_plain_at_t0_is_transformers_greedy_generate(prompt):
    tiny = target(False)
    ids = torch.tensor([PROMPTS[prompt]])
    expected = tiny.model.generate(
        ids, max_new_tokens=24, do_sample=False, eos_token_id=tiny.eos_id, pad_token_id=tiny.eos_id
    )[0, ids.shape[1] :]
    assert plain(prompt, 0.0, 0, exact=False).tokens.tolist() == expected.tolist()


def test_sampling_uses_the_noise_of_each_absolute_position():
    """At T>0 the token at absolute position t is argmax(logit/T + G(seed, t)), recomputed here by
    full forwards without a cache."""
    tiny, temperature = target(True), 0.8
    generation = plain(0, temperature, 5)
    sequence = list(PROMPTS[0])
    for token in generation.tokens.tolist():
        logits = tiny.model(torch.tensor([sequence])).logits[0, -1].double()
        noise = gumbel(5, len(sequence), 1, tiny.vocab_size)[0]
        assert token == int((logits / temperature + noise).argmax())
        sequence.append(token)
    assert generation.tokens.tolist() != plain(0, temperature, 6).tokens.tolist()


@functools.cache
def psi_drafter() -> str:
    """A Psi-Spec drafter folder for tiny-random-ar (LoRA at its zero init: the drafts are what the
    base says at noise tokens)."""
    from proposers.psi.lora import GatedLoRAModel, save_drafter, weights_hash

    folder, base = tempfile.mkdtemp(prefix="psi-drafter-"), load_target("tiny-random-ar").model
    save_drafter(
        GatedLoRAModel(base, 4, 8.0),
        Path(folder),
        {"base": "tiny-random-ar", "base_hash": weights_hash(base), "rank": 4, "alpha": 8.0, "max_block": 8},
    )
    return folder


SPECS = {
    "draft-model": "draft-model:tiny-random-ar:1",
    "psi-linear": f"psi-linear:{psi_drafter()}",
    "psi-tree": f"psi-tree:{psi_drafter()}:K=2",
}
"""The spec each AR family is tested with, for the families that need an argument."""


@settings(max_examples=60, deadline=None)
@given(
    prompt=st.integers(0, len(PROMPTS) - 1),
    seed=st.integers(0, 2**32),
    temperature=st.sampled_from([0.0, 0.7, 1.0]),
    budget=st.integers(0, 10),
    tree_seed=st.integers(0, 1000),
    proposer=st.sampled_from(["random", *(SPECS.get(name, name) for name in proposers_for("ar"))]),
)
def test_speculative_equals_plain_in_exactness_mode(prompt, seed, temperature, budget, tree_seed, proposer):
    reference = plain(prompt, temperature, seed)
    draft = (
        RandomTree(reference.tokens.tolist(), tree_seed)
        if proposer == "random"
        else build_proposer(proposer, target(True), reference)
    )
    spec = ar_decode(target(True), PROMPTS[prompt], draft, ARConfig(24, temperature, seed), budget)
    report = check_lossless(reference, spec, near_tie_tolerance(torch.float64))
    assert report.exact, report
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    check_accounting(spec)
    assert spec.metrics.nfe <= reference.metrics.nfe


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fast_mode_tree_verification_matches_plain(temperature):
    """float32, one batched tree forward per pass: no divergence on the tiny target (its decisions
    are far from float32 noise); a near-tie would be reported, never a logic error."""
    for seed in range(3):
        reference = plain(0, temperature, seed, exact=False)
        spec = ar_decode(
            target(False), PROMPTS[0], RandomTree(reference.tokens.tolist(), seed), ARConfig(24, temperature, seed), 8
        )
        assert check_lossless(reference, spec).exact
        assert max(spec.pass_commits) > 2


@pytest.mark.parametrize("budget", [1, 3, 8])
def test_oracle_commits_budget_plus_one_per_pass(budget):
    reference = plain(0, 1.0, 2)
    spec = ar_decode(
        target(True), PROMPTS[0], build_proposer("oracle", target(True), reference), ARConfig(24, 1.0, 2), budget
    )
    left = 24
    for commits in spec.pass_commits:
        assert commits == min(budget + 1, left)
        left -= commits
    assert set(spec.stops) == {"leaf"}  # every walk reached the end of its chain


def test_budget_zero_is_plain_decoding():
    reference = plain(2, 0.7, 1)
    spec = ar_decode(
        target(True), PROMPTS[2], build_proposer("prompt-lookup", target(True), reference), ARConfig(24, 0.7, 1), 0
    )
    assert spec.tokens.tolist() == reference.tokens.tolist()
    assert spec.metrics.nfe == spec.metrics.rows == 24 and spec.pass_commits == [1] * 24


def test_generation_stops_after_the_end_of_sequence_token():
    base = target(True)
    reference = plain(0, 1.0, 3)
    eos = reference.tokens[9].item()
    first = reference.tokens.tolist().index(eos)
    stopping = ARTarget(base.model, base.tokenizer, eos, rowwise=True)
    for generation in (
        ar_plain_decode(stopping, PROMPTS[0], ARConfig(24, 1.0, 3)),
        ar_decode(stopping, PROMPTS[0], build_proposer("oracle", stopping, reference), ARConfig(24, 1.0, 3), 6),
    ):
        assert generation.tokens.tolist() == reference.tokens.tolist()[: first + 1]
        assert generation.answer_ids == reference.tokens.tolist()[:first]


def test_prepare_truncates_and_refuses_malformed_nodes():
    chain = [
        DraftNode(0, Transition((0,), (5,))),
        DraftNode(1, Transition((1,), (9,))),
        DraftNode(2, Transition((2,), (7,))),
        DraftNode(0, Transition((0,), (5,))),  # a repeated sibling
        DraftNode(0, Transition((0,), (6,))),
    ]
    tree = prepare_ar(DraftTree(tuple(chain)), budget=5, max_depth=2, eos_id=9)
    # depth 3 dropped (max_depth), the repeat dropped; nothing is kept below eos (9)
    assert tree.tokens.tolist() == [5, 9, 6] and tree.parents == [0, 1, 0]
    assert tree.children == {(0, 5): 1, (1, 9): 2, (0, 6): 3}
    assert prepare_ar(DraftTree(tuple(chain)), budget=1, max_depth=9, eos_id=0).tokens.tolist() == [5]
    with pytest.raises(ValueError, match="offset"):
        prepare_ar(DraftTree((DraftNode(0, Transition((1,), (5,))),)), 4, 9, 0)
    with pytest.raises(ValueError, match="invalid"):
        prepare_ar(DraftTree((DraftNode(1, Transition((0,), (5,))),)), 4, 9, 0)


def test_negative_control_wrong_noise_position_is_caught(monkeypatch):
    """A verifier that samples every depth with the root's noise must be reported as a logic error."""

    class RootNoise(NoiseSource):
        def forget_before(self, step: int) -> None:
            self.root = step
            super().forget_before(step)

        def __call__(self, step: int):
            return super().__call__(self.root)

    monkeypatch.setattr(ar, "NoiseSource", RootNoise)
    verdicts = []
    for seed in range(3):
        reference = plain(0, 1.0, seed)
        spec = ar_decode(
            target(True), PROMPTS[0], build_proposer("oracle", target(True), reference), ARConfig(24, 1.0, seed), 4
        )
        verdicts.append(check_lossless(reference, spec, near_tie_tolerance(torch.float64)).verdict)
    assert "logic-error" in verdicts and "exact" not in verdicts


@pytest.mark.parametrize("exact", [False, True])
def test_negative_control_rejected_keys_kept_is_caught(monkeypatch, exact):
    """A session that keeps the first nodes' keys/values instead of the accepted path's lets
    rejected drafts reach later tokens: the check must catch it."""
    commit = ARSession.commit

    def keep_first(self, path, bonus):
        commit(self, list(range(1, len(path) + 1)), bonus)

    monkeypatch.setattr(ARSession, "commit", keep_first)
    reference = plain(0, 0.0, 0, exact=exact)
    caught = []
    for tree_seed in range(4):
        spec = ar_decode(
            target(exact),
            PROMPTS[0],
            RandomTree(reference.tokens.tolist(), tree_seed, hit=0.5),
            ARConfig(24, 0.0, 0),
            8,
        )
        caught.append(check_lossless(reference, spec).verdict == "logic-error")
    assert any(caught)

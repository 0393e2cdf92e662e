"""Rejection-sampling mode: lossless in distribution, proved by chi-square tests over many seeds
(real `scipy.stats`) on a tiny vocabulary, each with a wrong acceptance rule as the negative control
caught by the same test; greedy token for token at T=0; reproducible from the seed."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from scipy.stats import chisquare

from harness.decoding import ar_rejection
from harness.decoding.ar_rejection import (
    ACCEPT_STREAM,
    DRAFT_STREAM,
    DraftChain,
    StreamNoise,
    acceptance_uniform,
    accepts,
    ar_rejection_decode,
    residual_token,
    target_distribution,
)
from harness.decoding.autoregressive import ARConfig, ARDraftRequest, ar_plain_decode
from harness.targets.ar import ARTarget

V = 5
PROMPT = [1, 3, 0, 2]
SEEDS = 1000
CONTROL_SEEDS = 600
ALPHA = 1e-3
"""A correct sampler's p-value is above it (the seeds are fixed, so each test is deterministic);
the negative controls' are far below."""


@functools.cache
def tiny_vocab(seed: int, scale: float = 1.0) -> ARTarget:
    """A 1-layer Llama over 5 tokens whose next-token distributions are far from uniform; it has no
    end-of-sequence token (id V is never sampled), so every generation has gen_length tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        initializer_range=scale,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).double()
    return ARTarget(model, None, V, name=f"tiny-vocab:{seed}")


def next_distribution(target: ARTarget, ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([ids])).logits[0, -1]
    return target_distribution(logits, temperature)


class FixedQ:
    """Drafts from a fixed distribution q at every depth (any q must leave the output's law at p)."""

    def __init__(self, q: torch.Tensor):
        self.q = q

    def propose_chain(self, request: ARDraftRequest) -> DraftChain:
        tokens = []
        for depth in range(request.budget):
            scores = self.q.log() + (request.noise(request.context.numel() + depth)[0] if request.noise else 0)
            tokens.append(int(scores.argmax()))
        return DraftChain(tokens, self.q.expand(len(tokens), V).clone())


class SmallModel:
    """Drafts from another tiny model's softmax(logit / T): q depends on the chain so far."""

    def __init__(self, draft: ARTarget):
        self.draft = draft

    def propose_chain(self, request: ARDraftRequest) -> DraftChain:
        ids = request.context.tolist()
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        for depth in range(request.budget):
            q = next_distribution(self.draft, ids + tokens, request.temperature)
            noise = request.noise(len(ids) + depth)[0] if request.noise else 0
            tokens.append(int((q.log() + noise).argmax()))
            qs.append(q)
        return DraftChain(tokens, torch.stack(qs) if qs else torch.zeros(0, V, dtype=torch.float64))


def exact_law(target: ARTarget, length: int) -> dict[tuple[int, ...], float]:
    """P(x_1..x_length) under plain sampling at T=1, by enumeration."""
    after = functools.cache(lambda prefix: next_distribution(target, PROMPT + list(prefix)))
    return {
        tokens: float(torch.prod(torch.stack([after(tokens[:i])[t] for i, t in enumerate(tokens)])))
        for tokens in itertools.product(range(V), repeat=length)
    }


def p_value(counts: dict[tuple[int, ...], int], law: dict[tuple[int, ...], float]) -> float:
    """Chi-square goodness of fit, cells with an expected count under 5 pooled into one."""
    n = sum(counts.values())
    big = [cell for cell in law if law[cell] * n >= 5]
    small = [cell for cell in law if cell not in big]
    observed = [counts.get(cell, 0) for cell in big] + ([sum(counts.get(cell, 0) for cell in small)] if small else [])
    expected = [law[cell] * n for cell in big] + ([sum(law[cell] * n for cell in small)] if small else [])
    assert sum(observed) == n  # every sample fell in a cell of the law
    return float(chisquare(observed, expected, sum_check=False).pvalue)


def sample_counts(target: ARTarget, proposer, length: int, budget: int, seeds: int) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(seeds):
        generation = ar_rejection_decode(target, PROMPT, proposer, ARConfig(length, 1.0, seed), budget)
        key = tuple(generation.tokens.tolist())
        counts[key] = counts.get(key, 0) + 1
    return counts


def wrong_residual(p: torch.Tensor, q: torch.Tensor, noise: torch.Tensor | None) -> int:
    """The classic bug: on rejection, sample from p instead of the residual."""
    return residual_token(p, torch.zeros_like(q), noise)


def one_step_counts(p: torch.Tensor, q: torch.Tensor, seeds: int) -> dict[tuple[int, ...], int]:
    """The token one verification step commits at position 0 (draft, accept or residual), per seed."""
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(seeds):
        draft = int((q.log() + StreamNoise(seed, V, DRAFT_STREAM)(0)[0]).argmax())
        noise = StreamNoise(seed, V, 0)(0)[0]
        token = (
            draft
            if ar_rejection.accepts(float(p[draft]), float(q[draft]), acceptance_uniform(seed, 0))
            else ar_rejection.residual_token(p, q, noise)
        )
        counts[(token,)] = counts.get((token,), 0) + 1
    return counts


P = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)
Q = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.5], dtype=torch.float64)
LAW1: dict[tuple[int, ...], float] = {(v,): float(P[v]) for v in range(V)}


def test_one_step_commits_tokens_distributed_as_p() -> None:
    assert p_value(one_step_counts(P, Q, 5000), LAW1) > ALPHA


@pytest.mark.parametrize("wrong", ["accept_always", "residual_from_p"])
def test_one_step_negative_controls_are_caught(monkeypatch, wrong) -> None:
    if wrong == "accept_always":
        monkeypatch.setattr(ar_rejection, "accepts", lambda p_x, q_x, u: True)
    else:
        monkeypatch.setattr(ar_rejection, "residual_token", wrong_residual)
    assert p_value(one_step_counts(P, Q, 5000), LAW1) < 1e-12


@pytest.mark.slow
def test_rejection_decoding_samples_the_target_law_and_wrong_rules_are_caught(monkeypatch) -> None:
    """The whole loop (one verify forward per pass, KV of the accepted prefix, residual, bonus) on a
    5-token model: the joint law of 3 tokens (125 cells) matches plain sampling's, drafted by another
    model (q depends on the chain) and by a fixed q; both wrong rules fail the same test."""
    target, length = tiny_vocab(0), 3
    law = exact_law(target, length)
    drafters = {"model": SmallModel(tiny_vocab(1)), "fixed": FixedQ(Q)}
    for name, drafter in drafters.items():
        assert p_value(sample_counts(target, drafter, length, 2, SEEDS), law) > ALPHA, name
    monkeypatch.setattr(ar_rejection, "accepts", lambda p_x, q_x, u: True)
    assert p_value(sample_counts(target, drafters["model"], length, 2, CONTROL_SEEDS), law) < 1e-6
    monkeypatch.undo()
    monkeypatch.setattr(ar_rejection, "residual_token", wrong_residual)
    assert p_value(sample_counts(target, drafters["fixed"], length, 2, CONTROL_SEEDS), law) < 1e-6


def test_the_loop_accepts_and_rejects_and_is_reproducible() -> None:
    target, drafter = tiny_vocab(0), SmallModel(tiny_vocab(1))
    config = ARConfig(12, 1.0, 7)
    first = ar_rejection_decode(target, PROMPT, drafter, config, 3)
    again = ar_rejection_decode(target, PROMPT, drafter, config, 3)
    assert first.tokens.tolist() == again.tokens.tolist() and first.pass_commits == again.pass_commits
    assert sum(first.pass_commits) == first.metrics.commits == 12 and first.metrics.nfe == len(first.pass_commits)
    assert first.stops and "token" in first.stops and sum(first.metrics.accepted_per_depth) > 0  # both outcomes occur
    assert first.metrics.rows == first.metrics.nfe + first.metrics.draft_nodes


def test_at_temperature_zero_it_is_greedy_decoding_token_for_token() -> None:
    target = tiny_vocab(0)
    plain = ar_plain_decode(target, PROMPT, ARConfig(16, 0.0, 0))
    for drafter in (SmallModel(tiny_vocab(1)), SmallModel(target), FixedQ(Q)):
        spec = ar_rejection_decode(target, PROMPT, drafter, ARConfig(16, 0.0, 0), 4)
        assert spec.tokens.tolist() == plain.tokens.tolist()
    same = ar_rejection_decode(target, PROMPT, SmallModel(target), ARConfig(16, 0.0, 0), 4)
    assert same.pass_commits == [5, 5, 5, 1]  # a drafter equal to the target: every draft accepted


def test_streams_are_disjoint_and_uniforms_in_range() -> None:
    assert 2**62 <= DRAFT_STREAM < ACCEPT_STREAM < 2**64
    u = [acceptance_uniform(3, t) for t in range(200)]
    assert all(0 < x < 1 for x in u) and len(set(u)) == 200
    assert not torch.equal(StreamNoise(3, V, DRAFT_STREAM)(5), StreamNoise(3, V, 0)(5))
    assert accepts(0.5, 0.25, 0.999) and not accepts(0.1, 0.5, 0.2) and accepts(0.1, 0.5, 0.19)


def test_a_draft_with_zero_probability_is_a_proposer_bug() -> None:
    q = torch.tensor([1.0, 0, 0, 0, 0], dtype=torch.float64)

    class Liar(FixedQ):
        def propose_chain(self, request: ARDraftRequest) -> DraftChain:
            return DraftChain([3] * request.budget, self.q.expand(request.budget, V).clone())

    with pytest.raises(ValueError, match="q = 0"):
        ar_rejection_decode(tiny_vocab(0), PROMPT, Liar(q), ARConfig(4, 1.0, 0), 2)
    with pytest.raises(ValueError, match="float64"):
        DraftChain([1], torch.ones(1, V))

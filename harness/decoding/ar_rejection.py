"""Rejection-sampling mode for autoregressive targets (Leviathan et al. 2023, Chen et al. 2023; Uno's
linear Psi-Spec sampler): lossless in distribution, not token for token.

The coupled mode (`harness.decoding.autoregressive`) reproduces plain decoding token for token by
giving drafter and verifier the same noise. Rejection mode is the classic alternative: a proposer
draws a chain x_1..x_k from its own distributions q_1..q_k (`DraftChain`, each q_d conditioned on the
context and x_1..x_{d-1}); one target forward gives p_1..p_{k+1}; x_d is accepted with probability
min(1, p_d(x_d) / q_d(x_d)); at the first rejection the token is drawn from the residual
norm(max(0, p_d - q_d)) and the pass ends; when all k are accepted a bonus token is drawn from p_{k+1}.
Every committed token is then distributed exactly as plain sampling from p, whatever q is, but the
tokens differ from plain decoding's with the same seed: rows of this mode get the verdict
`distribution` at T>0 (reported, not token-checked), and the proof is statistical
(tests/harness/decoding/test_ar_rejection.py: a chi-square test over many seeds, with a wrong
acceptance rule as the negative control). At T=0 p is one-hot, so every draft other than the
target's argmax is rejected and the residual is that argmax: the mode is greedy decoding, token for
token, and its T=0 rows are checked like coupled ones.

Randomness is the project's counter-based noise (`harness.decoding.noise`), keyed by the seed and
the absolute position, in three disjoint streams so that the draws are independent: the proposer's
draws (`DRAFT_STREAM`, handed to it as `ARDraftRequest.noise`), the acceptance uniforms
(`ACCEPT_STREAM`) and the target's draws (residual and bonus: the plain stream, so a bonus token is
the one plain decoding would sample after the same prefix). A position's draft noise may be read
again by a later pass only if no committed decision used it, so reuse never couples two draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from harness.decoding.autoregressive import ARConfig, ARDraftRequest, PassLog, target_token
from harness.decoding.batch import Decoding, Pass, decode_batch
from harness.decoding.generation import Generation
from harness.decoding.noise import NoiseSource, gumbel
from harness.decoding.tree import LEAF, NO_DRAFT, TOKEN
from harness.targets.ar import ARTarget

COUPLED, REJECTION = "coupled", "rejection"
"""How speculative AR decoding samples (`--ar-sampling`, the suite's `ar_sampling`); DLM arms are always coupled."""
DISTRIBUTION = "distribution"
"""The verdict of a rejection-mode row at T>0: equal to plain decoding in distribution, not checked
token for token."""
DRAFT_STREAM = 1 << 62
ACCEPT_STREAM = 1 << 63
"""Step offsets of the proposer's and the acceptance noise streams: positions never reach 2**62, so
the streams never share a Philox key with each other or with the plain stream (offset 0)."""


@dataclass(frozen=True)
class DraftChain:
    """A proposer's draft in rejection mode: tokens and the distributions they were drawn from."""

    tokens: list[int]
    q: Tensor
    """[len(tokens), V] float64 probabilities: q[d] is the distribution tokens[d] was drawn from,
    conditioned on the context and tokens[:d] (rows sum to 1)."""

    def __post_init__(self) -> None:
        if self.q.ndim != 2 or self.q.shape[0] != len(self.tokens) or self.q.dtype != torch.float64:
            raise ValueError(
                f"a draft chain of {len(self.tokens)} tokens needs q of shape [{len(self.tokens)}, V] "
                f"in float64, got {tuple(self.q.shape)} {self.q.dtype}"
            )


@runtime_checkable
class DistributionProposer(Protocol):
    """An AR proposer that can draft for rejection mode: it samples its chain with `request.noise`
    (the draft stream; None at T=0, where it drafts its argmax and q is what it believes) and returns
    the distributions it sampled from. `request.budget` bounds the chain's length."""

    def propose_chain(self, request: ARDraftRequest) -> DraftChain: ...


class StreamNoise:
    """G(seed, offset + position): one of the mode's noise streams, addressed by absolute position."""

    def __init__(self, seed: int, vocab_size: int, offset: int):
        self.source = NoiseSource(seed, 1, vocab_size)
        self.offset = offset

    def __call__(self, position: int) -> Tensor:
        return self.source(self.offset + position)

    def forget_before(self, position: int) -> None:
        self.source.forget_before(self.offset + position)


def acceptance_uniform(seed: int, position: int) -> float:
    """U(seed, position) in (0, 1): the uniform that decides acceptance at an absolute position,
    recovered from one Gumbel draw of the acceptance stream (G = -log(-log U))."""
    g = float(gumbel(seed, ACCEPT_STREAM + position, 1, 1)[0, 0])
    return math.exp(-math.exp(-g))


def target_distribution(logits: Tensor, temperature: float) -> Tensor:
    """p [V] float64: softmax(logit / T), or at T=0 one-hot on the argmax (ties to the lowest id)."""
    x = logits.double()
    if temperature > 0:
        return (x / temperature).softmax(-1)
    return torch.nn.functional.one_hot(x.argmax(), x.numel()).double()


def accepts(p_x: float, q_x: float, u: float) -> bool:
    """Accept a draft token with probability min(1, p(x) / q(x)), decided by the uniform u."""
    return u * q_x < p_x


def residual_token(p: Tensor, q: Tensor, noise: Tensor | None) -> int:
    """A draw from norm(max(0, p - q)) by Gumbel-max with the target's noise (argmax at T=0). An
    empty residual (p == q up to rounding, so rejection had probability ~0) falls back to p."""
    residual = (p - q).clamp_min(0)
    if not residual.sum() > 0:
        residual = p
    scores = residual.log()
    if noise is not None:
        scores = scores + noise.to(scores.device)
    return int(scores.argmax())


def ar_rejection_decode(
    target: ARTarget, prompt_ids: list[int] | Tensor, proposer: DistributionProposer, config: ARConfig, budget: int
) -> Generation:
    """One generation, driven alone; `decode_batch` drives many `ar_rejection_generation`s together."""
    return decode_batch(target, [ar_rejection_generation(target, prompt_ids, proposer, config, budget)])[0]


def ar_rejection_generation(
    target: ARTarget, prompt_ids: list[int] | Tensor, proposer: DistributionProposer, config: ARConfig, budget: int
) -> Decoding:
    """The rejection-mode loop (module docstring): one verify forward per pass over the root and the
    chain (yielded as a `Pass`), KV of the accepted prefix kept, the rest dropped, as in the coupled loop."""
    temperature, eos, seed = config.temperature, target.eos_id, config.seed
    log, session = PassLog.begin(target, prompt_ids, proposer, config, budget)
    sampled = temperature > 0
    plain = StreamNoise(seed, target.vocab_size, 0) if sampled else None
    drafting = StreamNoise(seed, target.vocab_size, DRAFT_STREAM) if sampled else None
    metrics, tokens = log.metrics, log.tokens
    while log.unfinished():
        position = session.position
        for stream in (plain, drafting):
            if stream is not None:  # sampled
                stream.forget_before(position)
        chain = log.draft(proposer.propose_chain, session, drafting, temperature)
        drafted = _kept(chain.tokens, min(budget, log.left()), eos)
        logits = yield Pass(session, torch.tensor(drafted, dtype=torch.long), list(range(len(drafted))))
        depth = 0
        while True:
            noise = plain(position + depth)[0] if plain else None
            if depth == len(drafted):  # every draft accepted (or none drafted): the bonus token from p
                token, stop = target_token(logits[depth], noise, temperature, False)[0], LEAF if drafted else NO_DRAFT
                break
            p, q_row, x = (
                target_distribution(logits[depth], temperature),
                chain.q[depth].to(logits.device),
                drafted[depth],
            )
            if not q_row[x] > 0:
                raise ValueError(f"the proposer drafted token {x} at depth {depth + 1} with q = 0")
            if not accepts(float(p[x]), float(q_row[x]), acceptance_uniform(seed, position + depth)):
                token, stop = residual_token(p, q_row, noise), TOKEN
                break
            if x == eos or len(tokens) + 1 == config.gen_length:  # it ends the generation: counted as the
                token, stop = x, LEAF  # pass's last commit, as the coupled loop does
                break
            tokens.append(x)
            metrics.accepted_per_depth[depth] += 1
            depth += 1
        tokens.append(token)
        log.end_pass(session, len(drafted), list(range(1, depth + 1)), token, stop)
    return log.generation(session, eos, None)


def _kept(tokens: list[int], most: int, eos: int) -> list[int]:
    """The chain the pass verifies: at most `most` tokens (the budget, the tokens left less the
    bonus), nothing after an end-of-sequence token."""
    kept = list(tokens[: max(most, 0)])
    return kept[: kept.index(eos) + 1] if eos in kept else kept

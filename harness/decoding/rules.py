"""Commit rules: pure functions from a block's logits, state and noise to one transition.

A rule decides, for one state of the current block, which masked positions the target commits at
this step and with which tokens (DESIGN.md section 3). Plain decoding applies it once per pass; the
speculative verifier applies it to every row it walks; proposers may simulate it on stale logits.
Because all of them call the same function, "the target's transition" means one thing everywhere.

Candidate at masked position i: `argmax_v logit[i, v]` at T=0, `argmax_v(logit[i, v]/T + G[i, v])` at
T>0 (ties: lowest token id, as torch.argmax). The mask token is never a candidate (a trained model
never proposes it; an untrained one can, and committing it would leave the position masked), but its
probability mass stays in the softmax that confidence is computed from. Confidence follows the
family convention, in float64:
`prob` is the untempered softmax probability of the candidate (LLaDA, SDAR, LLaDA2); `tempered_prob`,
`margin` (top-1 minus top-2 probability) and `neg_entropy` use softmax(logit/T) at T>0 (Dream's
decoder tempers before it scores), softmax(logit) at T=0. `top1` commits the most confident masked
position (ties: lowest position); `threshold` commits it plus every other masked position whose
confidence is >= tau (> tau for families with `threshold_strict`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from harness.errors import UserError
from harness.targets.families import Confidence, FamilySpec


@dataclass(frozen=True)
class Transition:
    """The positions (strictly increasing, block-relative) a step commits and their tokens."""

    positions: tuple[int, ...]
    tokens: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.positions) != len(self.tokens) or any(a >= b for a, b in zip(self.positions, self.positions[1:])):
            raise ValueError(f"malformed transition {self}")

    def apply(self, state: Tensor) -> Tensor:
        """The state after this transition (a new tensor)."""
        out = state.clone()
        out[list(self.positions)] = torch.tensor(self.tokens, dtype=out.dtype, device=out.device)
        return out


def greedy_tokens(logits: Tensor, mask_id: int) -> Tensor:
    """[B] the T=0 candidate at every position of a block's logits [B, V]: argmax, mask excluded.
    `max` returns the first maximal index, as `argmax` does, in half its time on the CPU."""
    return without_mask(logits, mask_id).max(-1).indices


def without_mask(scores: Tensor, mask_id: int) -> Tensor:
    """A copy of `scores` [..., V] with the mask token's column at -inf: it is never a candidate."""
    out = scores.clone()
    out[..., mask_id] = -math.inf
    return out


def candidate_scores(logits: Tensor, noise: Tensor | None, temperature: float) -> Tensor:
    """[B, V] float64 scores whose argmax (mask excluded) is the candidate: logit/T + G, or logit at T=0."""
    x = logits.double()
    if temperature <= 0:
        return x
    if noise is None:
        raise ValueError("sampling at T>0 needs Gumbel noise")
    return x / temperature + noise.to(x.device)


def candidate_tokens(logits: Tensor, noise: Tensor | None, temperature: float, mask_id: int) -> Tensor:
    """[B] the rule's candidate token at every position (what a rule commits where it commits, and
    what proposers draft from a stale view)."""
    return greedy_tokens(candidate_scores(logits, noise, temperature), mask_id)


@dataclass(frozen=True)
class StepRecord:
    """How close the rule's decision was at one step: forensics for divergences.

    `confidence_margin` is the top-1 minus top-2 confidence over masked positions (inf when one is
    left). `decision_gap` is the smallest gap of any decision the rule made, approximately in logit
    units so one tolerance fits every convention: the gap between the two best candidate scores at
    each masked position (times T; the mask token excluded, it is never a candidate), the
    log-confidence gap between the top two positions and, for threshold rules, each
    position's log-distance to tau (raw differences for `margin` and `neg_entropy`).
    """

    confidence_margin: float
    decision_gap: float


@dataclass(frozen=True)
class Scored:
    """What a rule decides on for one state: its masked positions (increasing), their candidate
    tokens and confidences. A position's candidate and confidence depend on its own logits row and
    noise row only, never on the other positions, so at T=0 the scores of fixed logits also decide
    every later state of the block (`decide(rule, state)`): a chain drafted on one stale view scores
    it once, not once per depth. At T>0 each step has its own noise and needs its own scores."""

    positions: Tensor
    tokens: Tensor
    confidence: Tensor
    token_gaps: Tensor | None = None
    """[M] each position's best minus second-best candidate score, when asked for (`Rule.record`)."""

    def decide(self, rule: Rule, state: Tensor | None = None) -> Transition:
        """The rule's transition from the scored state, or from a later `state` of the same block
        (those of the scored positions still masked in it), exactly as the rule on that state."""
        if state is None:
            return rule.decide_scored([self])[0]
        keep = (state[self.positions] == rule.mask_id).nonzero().squeeze(1)
        return rule.decide_scored([Scored(self.positions[keep], self.tokens[keep], self.confidence[keep])])[0]


_LOG_SCALED = ("prob", "tempered_prob")


@dataclass(frozen=True)
class Rule:
    """A commit rule: `rule(logits [B, V], state [B], noise [B, V] | None, T) -> Transition`.

    The noise may also be given as the rows of the state's masked positions only, [M, V] (the
    verifier draws no others, `noise.rows_many`); with M = B both readings are the same tensor."""

    name: str
    """"top1" or "threshold"."""
    mask_id: int
    confidence: Confidence
    tau: float | None = None
    """Threshold rules only."""
    strict: bool = False
    """Threshold rules: commit confidence > tau rather than >= tau."""

    def __str__(self) -> str:
        return self.name if self.tau is None else f"{self.name}:{self.tau:g}"

    def __call__(self, logits: Tensor, state: Tensor, noise: Tensor | None, temperature: float) -> Transition:
        return self.explain(logits, state, noise, temperature, record=False)[0]

    def explain(
        self, logits: Tensor, state: Tensor, noise: Tensor | None, temperature: float, record: bool = True
    ) -> tuple[Transition, StepRecord | None]:
        """The transition and, with `record`, how close its decision was (the reference keeps this)."""
        scored = self.score_many([logits], [state], None if noise is None else [noise], temperature, record)[0]
        return scored.decide(self), self.record(scored, temperature) if record else None

    def score(
        self, logits: Tensor, state: Tensor, noise: Tensor | None, temperature: float
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """What the rule decides on: the masked positions, their candidate tokens, confidences (the
        family's convention) and candidate scores [M, V]. Public so that a proposer ranking the
        alternatives to the rule's choice (Spiffy) ranks by the rule's own numbers."""
        masked = (state == self.mask_id).nonzero().squeeze(1)
        if masked.numel() == 0:
            raise ValueError("a commit rule needs at least one masked position")
        x = logits.index_select(0, masked.to(logits.device)).double()
        if noise is not None and noise.shape[0] != masked.numel():
            noise = noise[masked.cpu()]
        scores = candidate_scores(x, noise, temperature)
        tokens = greedy_tokens(scores, self.mask_id)
        return masked, tokens, self.confidence_of(x, tokens, temperature), scores

    def confidence_of(self, x: Tensor, tokens: Tensor, temperature: float) -> Tensor:
        """[...] the family's confidence of `tokens` [...] under float64 logits `x` [..., V], row by row."""
        tempered = x / temperature if temperature > 0 and self.confidence != "prob" else x
        if self.confidence == "prob":
            return x.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1).exp()
        if self.confidence == "tempered_prob":
            return tempered.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1).exp()
        if self.confidence == "margin":
            top2 = tempered.softmax(-1).topk(2, dim=-1).values
            return top2[..., 0] - top2[..., 1]
        probs = tempered.softmax(-1)
        return torch.special.xlogy(probs, probs).sum(-1)

    def decide_many(
        self, logits: Sequence[Tensor], states: Sequence[Tensor], noise: Sequence[Tensor] | None, temperature: float
    ) -> list[Transition]:
        """`self(logits[g], states[g], noise[g], temperature)` for every generation g (logits [B, V],
        state [B], noise [B, V]) in one pass of tensor operations over all their masked rows (each row
        is computed as alone, so the transitions are the same bit for bit). Why: a batch's
        proposers simulate the rule for every generation at each depth."""
        return self.decide_scored(self.score_many(logits, states, noise, temperature))

    def score_many(
        self,
        logits: Sequence[Tensor],
        states: Sequence[Tensor],
        noise: Sequence[Tensor] | None,
        temperature: float,
        keep_gaps: bool = False,
    ) -> list[Scored]:
        """What the rule decides on for every generation g, scored together as `decide_many` does
        (noise[g] [B, V], or the rows of the state's masked positions only; `keep_gaps` keeps each
        position's gap between its two best candidates, for `record`)."""
        masked = [(state == self.mask_id).nonzero().squeeze(1) for state in states]
        if any(m.numel() == 0 for m in masked):
            raise ValueError("a commit rule needs at least one masked position")
        x = concatenated([block.index_select(0, m.to(block.device)) for block, m in zip(logits, masked)]).double()
        rows_noise = None
        if noise is not None:
            rows_noise = concatenated([n if n.shape[0] == m.numel() else n[m] for n, m in zip(noise, masked)])
        candidates = without_mask(candidate_scores(x, rows_noise, temperature), self.mask_id)
        tokens = candidates.max(-1).indices  # as `greedy_tokens`
        sizes = [len(m) for m in masked]
        confidences = self.confidence_of(x, tokens, temperature).cpu().split(sizes)
        kept: Sequence[Tensor | None] = [None] * len(sizes)
        if keep_gaps:  # the token decision's gap is between candidates, and the mask token never is one
            top2 = candidates.topk(2, dim=-1).values
            kept = (top2[:, 0] - top2[:, 1]).cpu().split(sizes)
        return [Scored(m, t, c, k) for m, t, c, k in zip(masked, tokens.cpu().split(sizes), confidences, kept)]

    def record(self, scored: Scored, temperature: float) -> StepRecord:
        """How close the rule's decision on `scored` (scored with `keep_gaps`) was."""
        if scored.token_gaps is None:
            raise ValueError("a record needs the token gaps: score with keep_gaps=True")
        return self._record(scored.confidence, scored.token_gaps, temperature)

    def decide_scored(self, scored: Sequence[Scored]) -> list[Transition]:
        """The rule's transition for each scored state, all selected in one set of tensor operations:
        the confidences as the rows of one matrix (padding -inf, never chosen), the most confident
        position of each row (ties: the lowest), and for threshold rules every position at or above
        tau (above, for strict families) besides it."""
        if any(s.positions.numel() == 0 for s in scored):
            raise ValueError("a commit rule needs at least one masked position")
        confidence = rows([s.confidence for s in scored], -math.inf)
        top = confidence.argmax(1)
        positions, tokens = rows([s.positions for s in scored]).tolist(), rows([s.tokens for s in scored]).tolist()
        if self.tau is None:
            return [Transition((ps[t],), (ts[t],)) for ps, ts, t in zip(positions, tokens, top.tolist())]
        keep = confidence > self.tau if self.strict else confidence >= self.tau
        keep[torch.arange(len(scored)), top] = True
        return [
            Transition(tuple(compress(ps, ks)), tuple(compress(ts, ks)))
            for ps, ts, ks in zip(positions, tokens, keep.tolist())
        ]

    def _record(self, confidence: Tensor, token_gaps: Tensor, temperature: float) -> StepRecord:
        gaps = [float(token_gaps.min()) * (temperature if temperature > 0 else 1.0)]
        scale = (lambda c: c.clamp_min(1e-300).log()) if self.confidence in _LOG_SCALED else (lambda c: c)
        margin = math.inf
        if confidence.numel() > 1:
            best2 = confidence.topk(2).values
            margin = float(best2[0] - best2[1])
            scaled2 = scale(best2)  # elementwise and monotone: the top two of the scaled confidences
            gaps.append(float(scaled2[0] - scaled2[1]))
        if self.tau is not None and (self.confidence not in _LOG_SCALED or self.tau > 0):
            tau = math.log(self.tau) if self.confidence in _LOG_SCALED else self.tau
            scaled = scale(confidence)
            others = scaled[torch.arange(scaled.numel(), device=scaled.device) != confidence.argmax()]
            if others.numel():
                gaps.append(float((others - tau).abs().min()))
        return StepRecord(margin, min(gaps))


def concatenated(tensors: Sequence[Tensor]) -> Tensor:
    """`torch.cat(tensors)`, without the copy when there is one."""
    return tensors[0] if len(tensors) == 1 else torch.cat(list(tensors))


def rows(vectors: Sequence[Tensor], padding: float = 0) -> Tensor:
    """Vectors of several generations as the rows of one matrix, padded on the right (one is a view)."""
    if len(vectors) == 1:
        return vectors[0][None]
    return pad_sequence(list(vectors), batch_first=True, padding_value=padding)


def parse_rule(text: str, family: FamilySpec, mask_id: int) -> Rule:
    """ "top1" or "threshold:TAU", with the family's confidence and strictness conventions."""
    name, _, arg = text.partition(":")
    if name == "top1" and not arg:
        return Rule("top1", mask_id, family.confidence)
    if name == "threshold":
        try:
            tau = float(arg)
        except ValueError:
            raise UserError(f"bad rule {text!r}: the threshold needs a number, e.g. threshold:0.9") from None
        if not math.isfinite(tau):
            raise UserError(f"bad rule {text!r}: tau must be finite")
        return Rule("threshold", mask_id, family.confidence, tau, family.threshold_strict)
    raise UserError(f"unknown rule {text!r}; use top1 or threshold:TAU (e.g. threshold:0.9)")

"""The lossless check: is a speculative generation token for token the plain one?

It compares two generations of the same prompt, seed, rule and temperature. In exactness mode
(`target.exact()`: float64, rows evaluated one by one) any divergence is a bug. In a fast mode
(float32/bf16, batched rows) a state's logits may change in the last bits with the batch it was
evaluated in, so a decision that was a near-tie can flip; the check then reports where the arms first
diverge and how close the plain arm's decision was at that step:

- `confidence_margin`: the top-1 minus top-2 confidence over the masked positions at that step;
- `decision_gap`: the smallest gap of any decision the rule made at that step, roughly in logit
  units (see `StepRecord`). The divergence is a near-tie when it is below the tolerance of the
  target's dtype (`NEAR_TIE`), otherwise a logic error.

The tolerances sit well above the batch-shape effects of each dtype and far below the gaps of typical
decisions, so a flip at a real decision is never excused. float32, measured by
`benchmarks/padding_margin.py` (the largest |logit difference| padding makes before trajectories
part): up to 1e-6 on the tiny-random targets, 2.2e-5 on the zoo's llada-a, 1.1e-4 on sdar-smollm2
(SmolLM2-135M's real weights; 0 on the zoo's block-causal toys); the tolerance 2e-3 is 18x above the
largest. A divergence past the end
of the plain trajectory, or in the tokens but not in the trajectory, has no record and is a logic error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from harness.decoding import DecodeConfig, Generation, decode_batch, plain_generation

NEAR_TIE: dict[torch.dtype, float] = {
    torch.float64: 1e-9,
    torch.float32: 2e-3,
    torch.float16: 2e-2,
    torch.bfloat16: 1e-1,
}


@dataclass(frozen=True)
class Divergence:
    token: int | None
    """First index in the committed tokens where the arms differ; None when the answers are equal
    but the commit order was not (still a failure: the trajectory must match too)."""
    step: int | None
    """First global commit step whose transition differs; None when the trajectories agree but the
    committed tokens do not (they are not the trajectory's: always a logic error)."""
    confidence_margin: float | None
    decision_gap: float | None
    near_tie: bool


@dataclass(frozen=True)
class LosslessReport:
    exact: bool
    divergence: Divergence | None
    tolerance: float

    @property
    def verdict(self) -> Literal["exact", "near-tie", "logic-error"]:
        if self.divergence is None:
            return "exact"
        return "near-tie" if self.divergence.near_tie else "logic-error"

    def as_dict(self) -> dict:
        first = None
        if self.divergence is not None:
            d = self.divergence
            first = {
                "token": d.token,
                "step": d.step,
                "confidence_margin": _finite(d.confidence_margin),
                "decision_gap": _finite(d.decision_gap),
                "near_tie": d.near_tie,
            }
        return {
            "exact": self.exact,
            "verdict": self.verdict,
            "first_divergence": first,
            "near_tie_tolerance": self.tolerance,
        }


def near_tie_tolerance(dtype: torch.dtype) -> float:
    return NEAR_TIE.get(dtype, NEAR_TIE[torch.bfloat16])


def check_lossless(plain: Generation, spec: Generation, tolerance: float = NEAR_TIE[torch.float32]) -> LosslessReport:
    """Compare `spec` with the reference `plain` (which must carry its per-step records)."""
    if plain.records is None:
        raise ValueError("the reference must be a plain generation (it carries the per-step records)")
    step = _first_difference(plain.steps, spec.steps)
    token = _first_difference(plain.tokens.tolist(), spec.tokens.tolist())
    if step is None and token is None:
        return LosslessReport(True, None, tolerance)
    record = plain.records[step] if step is not None and step < len(plain.records) else None
    margin = record.confidence_margin if record else None
    gap = record.decision_gap if record else None
    near_tie = gap is not None and gap < tolerance
    return LosslessReport(False, Divergence(token, step, margin, gap, near_tie), tolerance)


def batch_difference(batched: Generation, alone: Generation) -> str | None:
    """The first way a generation decoded in a batch is not its batch-1 decode bit for bit (None when
    it is): trajectory, tokens, commits per pass, pass and row counts, acceptance, stops and, when both
    kept them, every walked row's logits and every handed-over stale view, compared bitwise. In
    exactness mode batching must change nothing (DESIGN.md section 3, "Batches")."""
    for name in ("steps", "pass_commits", "stops"):
        index = _first_difference(getattr(batched, name) or [], getattr(alone, name) or [])
        if index is not None:
            return f"{name} differ first at index {index}"
    if not torch.equal(batched.tokens, alone.tokens):
        return f"tokens differ first at index {_first_difference(batched.tokens.tolist(), alone.tokens.tolist())}"
    for name in ("nfe", "rows", "commits", "draft_nodes", "accepted_per_depth", "stale_hits", "stale_commits"):
        if getattr(batched.metrics, name) != getattr(alone.metrics, name):
            return f"{name}: {getattr(batched.metrics, name)} in the batch, {getattr(alone.metrics, name)} alone"
    for name in ("pass_logits", "following"):
        ours, theirs = getattr(batched, name), getattr(alone, name)
        if ours is None or theirs is None:
            continue
        for index, (a, b) in enumerate(zip(ours, theirs)):
            if (a is None) != (b is None) or (a is not None and not _bitwise_equal(a, b)):
                return f"{name}[{index}] differ (max |difference| {_max_difference(a, b)})"
    return None


def record_drift(batched: Generation, alone: Generation) -> float:
    """The largest change of a step's decision gap (`StepRecord.decision_gap`) between two plain
    decodes of one prompt, over the steps both took from the same state (up to and including the
    first where they part). Padding moves it by about what it moves a logit; a defect of the batched
    path moves it by much more even where no token flips, or where the first flip is at a near-tie."""
    drift = 0.0
    for index, (a, b) in enumerate(zip(batched.records or [], alone.records or [])):
        if math.isfinite(a.decision_gap) and math.isfinite(b.decision_gap):
            drift = max(drift, abs(a.decision_gap - b.decision_gap))
        if index >= len(batched.steps) or index >= len(alone.steps) or batched.steps[index] != alone.steps[index]:
            break
    return drift


def largest_padding_shift(target: Any, prompts: list[list[int]], config: DecodeConfig, batch_size: int) -> float:
    """The largest |logit difference| padding makes: plain decodes of `prompts` (a `DLMTarget`'s) at
    batch 1 and at `batch_size`, compared pass by pass up to the first step where their trajectories
    part (after it the passes see different states). What the float32 tolerance must stand above."""
    alone = decode_batch(target, [plain_generation(target, p, config, keep_logits=True) for p in prompts], 1)
    batched = decode_batch(target, [plain_generation(target, p, config, keep_logits=True) for p in prompts], batch_size)
    largest = 0.0
    for a, b in zip(alone, batched):
        for x, y, step_a, step_b in zip(a.pass_logits or [], b.pass_logits or [], a.steps, b.steps):
            if x is None or y is None or x.shape != y.shape:
                continue
            largest = max(largest, float((x.double() - y.double()).abs().max()))
            if step_a != step_b:
                break
    return largest


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():  # bits, not values: -0.0 against 0.0 or one NaN against another differ
        bits = {
            torch.float64: torch.int64,
            torch.float32: torch.int32,
            torch.float16: torch.int16,
            torch.bfloat16: torch.int16,
        }[a.dtype]
        return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))
    return torch.equal(a, b)


def _max_difference(a: torch.Tensor | None, b: torch.Tensor | None) -> float | None:
    if a is None or b is None or a.shape != b.shape:
        return None
    return float((a.double() - b.double()).abs().max())


def _first_difference(a: list, b: list) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: an unbounded margin (one masked position left) is reported as null."""
    return value if value is not None and math.isfinite(value) else None

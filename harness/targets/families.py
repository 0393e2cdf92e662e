"""Family presets: the conventions of each target DLM family (DESIGN.md section 2).

A preset carries what the decoding code must agree on for a family: how attention is masked, whether
logits are shifted, whether finished blocks can be cached, and how confidence is defined. Token ids
(mask, eos) belong to a concrete checkpoint and its tokenizer, so they live on the target, not here;
`default_mask_id` is the id the published checkpoints use (-1 for `converted`, whose mask id is
chosen per conversion and always recorded in the checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import UserError

Attention = Literal["bidirectional", "block_causal"]
Confidence = Literal["prob", "tempered_prob", "margin", "neg_entropy"]


@dataclass(frozen=True)
class FamilySpec:
    name: str
    attention: Attention
    shifted_logits: bool
    """True when position i-1 predicts token i (Dream)."""
    caches_finished_blocks: bool
    """True when a finished block's keys/values are exact for all later blocks (block-causal)."""
    confidence: Confidence
    threshold_strict: bool
    """True when the threshold rule commits confidence > tau, False for >= tau."""
    default_mask_id: int
    answer_cut_at_gen_length: bool = False
    """True when the published generate returns the first gen_length answer positions only (LLaDA2's
    `x[:, :P + gen_length]`), not the rest of the last block; False keeps every decoded position
    (SDAR's `block_diffusion_generate` returns the whole canvas)."""
    causal_context: bool = False
    """True when the prompt and finished blocks are the base model's causal computation (adapter
    off) and only the active block is bidirectional and adapted: an autoregressive LM converted to
    block diffusion (harness/targets/converted.py)."""


FAMILIES: dict[str, FamilySpec] = {
    "llada": FamilySpec("llada", "bidirectional", False, False, "prob", False, 126336),
    "dream": FamilySpec("dream", "bidirectional", True, False, "tempered_prob", False, 151666),
    "sdar": FamilySpec("sdar", "block_causal", False, True, "prob", False, 151669),
    "llada2": FamilySpec("llada2", "block_causal", False, True, "prob", True, 156895, answer_cut_at_gen_length=True),
    "converted": FamilySpec("converted", "block_causal", True, True, "prob", False, -1, causal_context=True),
}


def family(name: str) -> FamilySpec:
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise UserError(f"unknown target family {name!r}; choose one of: {known}") from None

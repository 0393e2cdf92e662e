"""Batches change no prompt's decode (DESIGN.md section 3, "Batches"): in exactness mode every prompt's
tokens, trajectory, counts and logits equal its batch-1 decode bit for bit, for every family, plain
and speculative, T=0 and T=1; a batch-variant evaluation is caught by the same checker (negative
control); in float32 a batched decode differs from batch 1 at near-ties only, and every batched
speculative decode is still lossless against the batched plain one."""

from __future__ import annotations

import functools
from typing import cast

import pytest
import torch

from harness.decoding import DecodeConfig, decode_batch, parse_rule, plain_generation, speculative_generation
from harness.decoding.tree import Proposer
from harness.lossless import batch_difference, check_lossless, near_tie_tolerance
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer

FAMILIES = ["llada", "dream", "sdar", "llada2", "converted"]
PROMPTS = [list(b"Q: 2+2=?\nA:"), list(b"hi"), list(b"The quick brown fox"), list(b"7*6=")]
ARMS = [(None, 0), ("confidence", 2), ("confidence", 6), ("oracle", 3)]


@functools.cache
def target(family: str, exact: bool) -> DLMTarget:
    loaded = load_dlm_target(f"tiny-random:{family}")
    return loaded.exact() if exact else loaded


def config(t: DLMTarget, temperature: float, rule: str = "top1", geometry: tuple[int, int] = (16, 8)) -> DecodeConfig:
    return DecodeConfig(parse_rule(rule, t.family, t.mask_id), geometry[0], geometry[1], temperature, 5)


def decode_all(t: DLMTarget, cfg: DecodeConfig, arm: tuple[str | None, int], batch_size: int, plains=None):
    """Every prompt of PROMPTS under one arm, `batch_size` at a time (logits kept)."""
    proposer, budget = arm
    if proposer is None:
        loops = [plain_generation(t, p, cfg, keep_logits=True) for p in PROMPTS]
    else:
        loops = [
            speculative_generation(
                t, p, cast(Proposer, build_proposer(proposer, t, plain)), cfg, budget, keep_logits=True
            )
            for p, plain in zip(PROMPTS, plains)
        ]
    return decode_batch(t, loops, batch_size)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_batch_decodes_every_prompt_as_batch_one_bit_for_bit_in_exactness_mode(family, temperature):
    t = target(family, exact=True)
    cfg = config(t, temperature)
    plains = decode_all(t, cfg, (None, 0), 1)
    for arm in ARMS:
        alone = plains if arm[0] is None else decode_all(t, cfg, arm, 1, plains)
        for batch_size in (2, len(PROMPTS)):  # 2: prompts leave and join mid-batch
            batched = decode_all(t, cfg, arm, batch_size, plains)
            for prompt, (b, a) in enumerate(zip(batched, alone)):
                assert batch_difference(b, a) is None, (arm, batch_size, prompt, batch_difference(b, a))
                assert check_lossless(plains[prompt], b, near_tie_tolerance(torch.float64)).exact


MANY = PROMPTS + [list(f"{a}*{b}={a * b}; {b}+{a}=".encode()) for a in range(3, 9) for b in (4, 11)]
"""16 prompts of different lengths: a batch of 16 with generations leaving and joining."""
DRAFTERS = [("confidence", 8), ("confidence-branch", 6), ("oracle-order", 4), ("spot", 8)]
"""Every top1 proposer that drafts in batches (`BatchProposer`): one call per round for all."""


def decode_many(t: DLMTarget, cfg: DecodeConfig, arm, batch_size: int, prompts: list[list[int]], plains=None):
    proposer, budget = arm
    if proposer is None:
        return decode_batch(t, [plain_generation(t, p, cfg, keep_logits=True) for p in prompts], batch_size)
    built = [cast(Proposer, build_proposer(proposer, t, plain)) for plain in plains]
    loops = [speculative_generation(t, p, d, cfg, budget, keep_logits=True) for p, d in zip(prompts, built)]
    return decode_batch(t, loops, batch_size)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_proposers_decode_every_prompt_as_batch_one_at_batch_5_and_16(family, temperature):
    t = target(family, exact=True)
    cfg = config(t, temperature)
    plains = decode_many(t, cfg, (None, 0), 1, MANY)
    for arm in DRAFTERS:
        alone = decode_many(t, cfg, arm, 1, MANY, plains)
        assert sum(g.metrics.draft_nodes for g in alone) > 0, arm  # the arm drafts
        for batch_size in (5, 16):
            for prompt, (b, a) in enumerate(zip(decode_many(t, cfg, arm, batch_size, MANY, plains), alone)):
                assert batch_difference(b, a) is None, (arm, batch_size, prompt, batch_difference(b, a))
                assert check_lossless(plains[prompt], b, near_tie_tolerance(torch.float64)).exact


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_batch_of_64_decodes_every_prompt_as_batch_one(temperature):
    t = target("sdar", exact=True)
    cfg = config(t, temperature)
    prompts = [list(f"{a}+{b}=?".encode()) for a in range(8) for b in range(8)]
    plains = decode_many(t, cfg, (None, 0), 1, prompts)
    for b, a in zip(decode_many(t, cfg, (None, 0), 64, prompts), plains):
        assert batch_difference(b, a) is None
    for arm in DRAFTERS:
        alone = decode_many(t, cfg, arm, 1, prompts, plains)
        for b, a in zip(decode_many(t, cfg, arm, 64, prompts, plains), alone):
            assert batch_difference(b, a) is None, arm


@pytest.mark.parametrize("family", ["sdar", "llada"])
def test_threshold_rule_batches_bit_for_bit_in_exactness_mode(family):
    t = target(family, exact=True)
    cfg = config(t, 1.0, "threshold:0.05", (24, 8))
    plains = decode_all(t, cfg, (None, 0), 1)
    for arm in ARMS[:2]:
        alone = plains if arm[0] is None else decode_all(t, cfg, arm, 1, plains)
        for b, a in zip(decode_all(t, cfg, arm, 3, plains), alone):
            assert batch_difference(b, a) is None
    for arm in [("confidence-branch", 6), ("spot-sets", 6)]:
        alone = decode_many(t, cfg, arm, 1, MANY, plains := decode_many(t, cfg, (None, 0), 1, MANY))
        for b, a in zip(decode_many(t, cfg, arm, 5, MANY, plains), alone):
            assert batch_difference(b, a) is None, arm


class BatchVariant(DLMTarget):
    """Defect: a generation's logits move by 2**-30 per place it takes in a batched pass (none alone)."""

    def forward_many(self, passes):
        outputs = super().forward_many(passes)
        for place, out in enumerate(outputs):
            out.current = out.current + place * 2.0**-30
        return outputs


@pytest.mark.parametrize("family", ["sdar", "dream"])
def test_the_checker_catches_a_batch_variant_evaluation(family):
    exact = target(family, exact=True)
    variant = BatchVariant(exact.model, exact.family, exact.mask_id, exact.eos_id, exact.tokenizer, rowwise=True)
    cfg = config(exact, 0.0)
    alone = decode_all(variant, cfg, (None, 0), 1)
    assert all(batch_difference(a, b) is None for a, b in zip(alone, decode_all(exact, cfg, (None, 0), 1)))
    batched = decode_all(variant, cfg, (None, 0), len(PROMPTS))
    found = [batch_difference(b, a) for b, a in zip(batched, alone)]
    assert found[0] is None  # first place of every pass: unperturbed
    assert all(f is not None and f.startswith("pass_logits") for f in found[1:]), found


def test_a_padded_float32_batch_is_not_bitwise_batch_one():
    """The checker sees what padding does to float32 logits (the reason exactness mode never pads)."""
    t = target("llada", exact=False)
    cfg = config(t, 0.0)
    alone, batched = decode_all(t, cfg, (None, 0), 1), decode_all(t, cfg, (None, 0), len(PROMPTS))
    assert any(batch_difference(b, a) is not None for b, a in zip(batched, alone))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("rule", ["top1", "threshold:0.05"])
def test_float32_batches_differ_from_batch_one_at_near_ties_only(family, temperature, rule):
    t = target(family, exact=False)
    tolerance = near_tie_tolerance(t.dtype)
    cfg = config(t, temperature, rule, (24, 8))
    plains = decode_all(t, cfg, (None, 0), 1)
    batched_plains = decode_all(t, cfg, (None, 0), len(PROMPTS))
    for b, a in zip(batched_plains, plains):
        assert check_lossless(a, b, tolerance).verdict != "logic-error"
    for arm in ARMS[1:]:
        for spec, plain in zip(decode_all(t, cfg, arm, 3, batched_plains), batched_plains):
            assert check_lossless(plain, spec, tolerance).verdict != "logic-error"


def test_times_are_shares_of_the_batch():
    t = target("sdar", exact=False)
    cfg = config(t, 0.0)
    for generation in decode_all(t, cfg, (None, 0), 3):
        m = generation.metrics
        assert 0 < m.target_s <= m.wall_s and m.nfe == len(generation.steps)
    with pytest.raises(ValueError, match="batch size"):
        decode_batch(t, [], 0)

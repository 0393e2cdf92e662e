"""Batched autoregressive decoding (DESIGN.md section 3, "Batches"): in exactness mode every prompt's
tokens, counts and logits equal its batch-1 decode bit for bit, plain, prompt lookup, a draft model
and Psi-Spec, coupled and by rejection sampling, T=0 and T=1; a batch-variant evaluation is caught by
the same checker; in float32 the padded tree passes keep every prompt lossless against plain decoding."""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from typing import cast

import pytest

from harness.decoding import decode_batch
from harness.decoding.ar_rejection import DistributionProposer, ar_rejection_generation
from harness.decoding.autoregressive import ARConfig, ARProposer, ar_generation, ar_plain_generation
from harness.lossless import batch_difference, check_lossless
from harness.targets.ar import ARTarget
from harness.targets.registry import load_ar_only
from proposers import build_proposer

sys.path.insert(0, str(Path(__file__).parent))
SPECS: dict[str, str] = importlib.import_module("test_autoregressive").SPECS  # the drafters the AR tests use

PROMPTS = [
    list(b"The quick brown fox jumps over the lazy dog. The quick brown"),
    list(b"hi"),
    list(b"abcabcabcabc"),
    list(b"Q: 7*6=?\nA:"),
]
ARMS = [(None, 0), ("prompt-lookup", 4), (SPECS["draft-model"], 3), (SPECS["psi-linear"], 3), (SPECS["psi-tree"], 3)]


@functools.cache
def target(exact: bool) -> ARTarget:
    base = load_ar_only("tiny-random-ar")
    return base.exact() if exact else base


def recording(loop):
    """The loop, keeping every logits block it receives as its generation's `pass_logits` (the AR loops
    keep none), so `batch_difference` compares them bitwise too."""
    received, value = [], None
    try:
        while True:
            value = yield loop.send(value)
            received.append(value.clone())
    except StopIteration as stop:
        stop.value.pass_logits = received
        return stop.value


def decode_all(t: ARTarget, temperature: float, arm, batch_size: int, plains=None, rejection: bool = False):
    config = ARConfig(20, temperature, 3)
    proposer, budget = arm
    if proposer is None:
        loops = [ar_plain_generation(t, p, config) for p in PROMPTS]
    else:
        built = [build_proposer(proposer, t, plain) for plain in plains]
        if rejection:
            loops = [
                ar_rejection_generation(t, p, cast(DistributionProposer, drafter), config, budget)
                for p, drafter in zip(PROMPTS, built)
            ]
        else:
            loops = [
                ar_generation(t, p, cast(ARProposer, drafter), config, budget) for p, drafter in zip(PROMPTS, built)
            ]
    return decode_batch(t, [recording(loop) for loop in loops], batch_size)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_batch_decodes_every_prompt_as_batch_one_bit_for_bit_in_exactness_mode(temperature):
    t = target(True)
    plains = decode_all(t, temperature, (None, 0), 1)
    for arm in ARMS:
        alone = plains if arm[0] is None else decode_all(t, temperature, arm, 1, plains)
        for batch_size in (2, len(PROMPTS)):
            for b, a in zip(decode_all(t, temperature, arm, batch_size, plains), alone):
                assert batch_difference(b, a) is None, (arm, batch_size, batch_difference(b, a))
    draft = (SPECS["draft-model"], 3)  # rejection sampling: a proposer with draft distributions
    alone = decode_all(t, temperature, draft, 1, plains, rejection=True)
    for b, a in zip(decode_all(t, temperature, draft, 3, plains, rejection=True), alone):
        assert batch_difference(b, a) is None


class BatchVariant(ARTarget):
    """Defect: a generation's logits move by 2**-30 per place it takes in a batched pass."""

    def forward_many(self, passes):
        return [out + place * 2.0**-30 for place, out in enumerate(super().forward_many(passes))]


def test_the_checker_catches_a_batch_variant_evaluation():
    exact = target(True)
    variant = BatchVariant(exact.model, exact.tokenizer, exact.eos_id, rowwise=True)
    alone = decode_all(variant, 0.0, (None, 0), 1)
    assert all(batch_difference(a, b) is None for a, b in zip(alone, decode_all(exact, 0.0, (None, 0), 1)))
    found = [batch_difference(b, a) for b, a in zip(decode_all(variant, 0.0, (None, 0), len(PROMPTS)), alone)]
    assert found[0] is None  # first place of every pass: unperturbed
    assert all(f is not None and f.startswith("pass_logits") for f in found[1:]), found


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_float32_batches_are_lossless_against_plain_decoding(temperature):
    t = target(False)
    plains = decode_all(t, temperature, (None, 0), 1)
    batched_plains = decode_all(t, temperature, (None, 0), len(PROMPTS))
    for b, a in zip(batched_plains, plains):
        assert check_lossless(a, b).verdict != "logic-error"
    for arm in ARMS[1:]:
        for spec, plain in zip(decode_all(t, temperature, arm, 3, batched_plains), batched_plains):
            assert check_lossless(plain, spec).verdict != "logic-error", arm

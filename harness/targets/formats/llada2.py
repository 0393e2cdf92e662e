"""inclusionAI LLaDA2.0 (`model_type` "llada2_moe", `LLaDA2MoeModelLM`): Bailing-MoE-V2 layout.

Read from the published `configuration_llada2_moe.py` / `modeling_llada2_moe.py`:
- attention: one fused `query_key_value` projection whose output rows are all query heads, then
  all key heads, then all value heads; per-head RMSNorm `query_layernorm`/`key_layernorm` before
  RoPE; rotate-half RoPE on the first head_dim * partial_rotary_factor channels; output `dense`.
- MLP: layers below `first_k_dense_replace` are dense SwiGLU; the others a sigmoid-scored MoE
  (`gate.weight`, `gate.expert_bias`) with group-limited top-k on the biased scores, weights from
  the unbiased scores renormalised when k > 1 (the published gate does this whatever
  `norm_topk_prob` says) times `routed_scaling_factor`, plus an unscaled shared expert
  (`shared_experts`, width moe_intermediate_size * num_shared_experts).
Absent keys take the published config-class defaults (note `use_bias` defaults to true there).
"""

from __future__ import annotations

from typing import Any

from harness.targets.formats.base import CheckpointFormat, ConfigReader, TensorMap
from harness.targets.model import ModelConfig, MoEConfig


def read_config(c: ConfigReader) -> ModelConfig:
    c.supported("hidden_act", ("silu",), "silu")
    c.supported("use_bias", (False,), True)
    c.supported("norm_head", (False,), False)
    c.supported("score_function", ("sigmoid",), "sigmoid")
    c.supported("use_sliding_window", (False,), False)
    c.no_rope_scaling()
    hidden = c.integer("hidden_size")
    heads = c.integer("num_attention_heads")
    moe = None
    if c.raw.get("num_experts", 16) is not None:
        moe = MoEConfig(
            num_experts=c.integer("num_experts", 16),
            num_experts_per_tok=c.integer("num_experts_per_tok", 2),
            moe_intermediate_size=c.integer("moe_intermediate_size"),
            num_shared_experts=c.optional_int("num_shared_experts") or 0,
            n_group=c.integer("n_group", 8),
            topk_group=c.integer("topk_group", 4),
            routed_scaling_factor=c.number("routed_scaling_factor", 2.5),
            first_k_dense_replace=c.integer("first_k_dense_replace", 0),
        )
        if moe.n_group == 0 or moe.num_experts % moe.n_group or moe.topk_group > moe.n_group:
            c.fail(
                f"num_experts={moe.num_experts}, n_group={moe.n_group}, topk_group="
                f"{moe.topk_group} do not form equal expert groups"
            )
    dense_layers = c.integer("num_hidden_layers") if moe is None else moe.first_k_dense_replace
    return ModelConfig(
        vocab_size=c.integer("vocab_size"),
        hidden_size=hidden,
        intermediate_size=c.integer("intermediate_size") if dense_layers else c.optional_int("intermediate_size") or 0,
        num_layers=c.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=c.integer("num_key_value_heads"),
        head_dim=c.head_dim(hidden, heads),
        rope_theta=c.number("rope_theta", 10000.0),
        partial_rotary_factor=c.number("partial_rotary_factor", 0.5),
        rms_norm_eps=c.number("rms_norm_eps", 1e-5),
        qkv_bias=c.flag("use_qkv_bias", False),
        qk_norm=c.flag("use_qk_norm", True),
        tie_embeddings=c.flag("tie_word_embeddings", False),
        moe=moe,
    )


def write_config(cfg: ModelConfig) -> dict[str, Any]:
    moe = cfg.moe
    return {
        "architectures": ["LLaDA2MoeModelLM"],
        "model_type": "llada2_moe",
        "first_k_dense_replace": moe.first_k_dense_replace if moe else 0,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "moe_intermediate_size": moe.moe_intermediate_size if moe else None,
        "n_group": moe.n_group if moe else 1,
        "norm_head": False,
        "norm_topk_prob": True,
        "num_attention_heads": cfg.num_heads,
        "num_experts": moe.num_experts if moe else None,
        "num_experts_per_tok": moe.num_experts_per_tok if moe else 1,
        "num_hidden_layers": cfg.num_layers,
        "num_key_value_heads": cfg.num_kv_heads,
        "num_shared_experts": moe.num_shared_experts if moe else 0,
        "partial_rotary_factor": cfg.partial_rotary_factor,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": cfg.rope_theta,
        "routed_scaling_factor": moe.routed_scaling_factor if moe else 1.0,
        "score_function": "sigmoid",
        "tie_word_embeddings": cfg.tie_embeddings,
        "topk_group": moe.topk_group if moe else 1,
        "use_bias": False,
        "use_qk_norm": cfg.qk_norm,
        "use_qkv_bias": cfg.qkv_bias,
        "vocab_size": cfg.vocab_size,
    }


def _swiglu(names: TensorMap, theirs: str, ours: str) -> None:
    for proj in ("gate_proj", "up_proj", "down_proj"):
        names[f"{theirs}.{proj}.weight"] = (f"{ours}.{proj}.weight",)


def tensor_map(cfg: ModelConfig) -> TensorMap:
    names: TensorMap = {"model.word_embeddings.weight": ("embed_tokens.weight",)}
    for i in range(cfg.num_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        qkv = tuple(f"{ours}attn.{p}_proj" for p in "qkv")
        names[f"{theirs}attention.query_key_value.weight"] = tuple(f"{n}.weight" for n in qkv)
        if cfg.qkv_bias:
            names[f"{theirs}attention.query_key_value.bias"] = tuple(f"{n}.bias" for n in qkv)
        if cfg.qk_norm:
            names[f"{theirs}attention.query_layernorm.weight"] = (f"{ours}attn.q_norm.weight",)
            names[f"{theirs}attention.key_layernorm.weight"] = (f"{ours}attn.k_norm.weight",)
        names[f"{theirs}attention.dense.weight"] = (f"{ours}attn.o_proj.weight",)
        names[f"{theirs}input_layernorm.weight"] = (f"{ours}input_norm.weight",)
        names[f"{theirs}post_attention_layernorm.weight"] = (f"{ours}post_attn_norm.weight",)
        moe = cfg.moe
        if moe is None or i < moe.first_k_dense_replace:
            _swiglu(names, f"{theirs}mlp", f"{ours}mlp")
            continue
        names[f"{theirs}mlp.gate.weight"] = (f"{ours}mlp.gate.weight",)
        names[f"{theirs}mlp.gate.expert_bias"] = (f"{ours}mlp.expert_bias",)
        for j in range(moe.num_experts):
            _swiglu(names, f"{theirs}mlp.experts.{j}", f"{ours}mlp.experts.{j}")
        if moe.num_shared_experts:
            _swiglu(names, f"{theirs}mlp.shared_experts", f"{ours}mlp.shared")
    names["model.norm.weight"] = ("norm.weight",)
    if not cfg.tie_embeddings:
        names["lm_head.weight"] = ("lm_head.weight",)
    return names


LLADA2 = CheckpointFormat("llada2", ("llada2_moe",), ("LLaDA2MoeModelLM",), read_config, write_config, tensor_map)

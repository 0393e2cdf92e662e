"""Independent references for the target tests, written from the published modeling code.

Nothing here imports harness.targets.model: `naive_logits` reads tensors by their *published*
names (a dict such as a checkpoint file holds) and evaluates them with explicit per-head loops,
explicit masks and an explicit rotate-half RoPE; `naive_moe` runs every expert on every token and
picks weights with an explicit group-limited top-k. `write_published` writes a tiny random
checkpoint in a family's published layout (config keys, tensor names, tokenizer files) without
using spotbench's own writer. The `variant` switches break one convention on purpose, so tests
can show that the comparison notices it (negative controls).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import Tensor

from harness.targets.tiny import byte_tokenizer

VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 300, 32, 48, 2, 4, 2
TOKENS = {"pad_token_id": 256, "eos_token_id": 257, "mask_token_id": 258}  # the byte tokenizer's

CONFIGS = {
    "llada": {
        "architectures": ["LLaDAModelLM"],
        "model_type": "llada",
        "activation_type": "silu",
        "alibi": False,
        "attention_layer_norm": False,
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": HIDDEN,
        "embedding_size": VOCAB,
        "include_bias": False,
        "include_qkv_bias": False,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "max_sequence_length": 64,
        "mlp_hidden_size": INTER,
        "mlp_ratio": 4,
        "n_heads": HEADS,
        "n_kv_heads": KV_HEADS,
        "n_layers": LAYERS,
        "rms_norm_eps": 1e-5,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "vocab_size": VOCAB,
        "weight_tying": False,
    },
    "dream": {
        "architectures": ["DreamModel"],
        "model_type": "Dream",
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "attention_dropout": 0.0,
    },
    "sdar": {
        "architectures": ["SDARForCausalLM"],
        "model_type": "sdar",
        "attention_bias": False,
        "block_size": 4,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    },
    "llada2": {
        "architectures": ["LLaDA2MoeModelLM"],
        "model_type": "llada2_moe",
        "first_k_dense_replace": 1,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "moe_intermediate_size": 16,
        "n_group": 4,
        "norm_head": False,
        "norm_topk_prob": True,
        "num_attention_heads": HEADS,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "num_shared_experts": 1,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 600000,
        "routed_scaling_factor": 2.5,
        "score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "router_dtype": "fp32",
        "tie_word_embeddings": False,
        "topk_group": 2,
        "use_bias": False,
        "use_qk_norm": True,
        "use_qkv_bias": False,
        "vocab_size": VOCAB,
    },
}


def _shapes(family: str, c: dict) -> dict[str, tuple[int, ...]]:
    """Published tensor names and shapes, written out per family."""
    if family == "llada":
        d = HIDDEN // HEADS
        shapes = {
            "model.transformer.wte.weight": (VOCAB, HIDDEN),
            "model.transformer.ln_f.weight": (HIDDEN,),
            "model.transformer.ff_out.weight": (VOCAB, HIDDEN),
        }
        for i in range(LAYERS):
            p = f"model.transformer.blocks.{i}."
            shapes |= {
                p + "attn_norm.weight": (HIDDEN,),
                p + "ff_norm.weight": (HIDDEN,),
                p + "q_proj.weight": (HEADS * d, HIDDEN),
                p + "k_proj.weight": (KV_HEADS * d, HIDDEN),
                p + "v_proj.weight": (KV_HEADS * d, HIDDEN),
                p + "attn_out.weight": (HIDDEN, HEADS * d),
                p + "ff_proj.weight": (INTER, HIDDEN),
                p + "up_proj.weight": (INTER, HIDDEN),
                p + "ff_out.weight": (HIDDEN, INTER),
            }
        return shapes
    d = c.get("head_dim") or HIDDEN // HEADS
    embed = "model.word_embeddings.weight" if family == "llada2" else "model.embed_tokens.weight"
    shapes = {embed: (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,)}
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,)}
        if family == "llada2":
            shapes |= {
                p + "attention.query_key_value.weight": ((HEADS + 2 * KV_HEADS) * d, HIDDEN),
                p + "attention.query_layernorm.weight": (d,),
                p + "attention.key_layernorm.weight": (d,),
                p + "attention.dense.weight": (HIDDEN, HEADS * d),
            }
        else:
            for name, rows in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
                shapes[f"{p}self_attn.{name}_proj.weight"] = (rows * d, HIDDEN)
                if family == "dream":
                    shapes[f"{p}self_attn.{name}_proj.bias"] = (rows * d,)
            shapes[p + "self_attn.o_proj.weight"] = (HIDDEN, HEADS * d)
            if family == "sdar":
                shapes |= {p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)}
        mlps = [(p + "mlp", INTER)]
        if family == "llada2" and i >= c["first_k_dense_replace"]:
            e, m = c["num_experts"], c["moe_intermediate_size"]
            shapes |= {p + "mlp.gate.weight": (e, HIDDEN), p + "mlp.gate.expert_bias": (e,)}
            mlps = [(f"{p}mlp.experts.{j}", m) for j in range(e)]
            mlps.append((p + "mlp.shared_experts", m * c["num_shared_experts"]))
        for prefix, width in mlps:
            shapes |= {
                prefix + ".gate_proj.weight": (width, HIDDEN),
                prefix + ".up_proj.weight": (width, HIDDEN),
                prefix + ".down_proj.weight": (HIDDEN, width),
            }
    return shapes


def random_weights(family: str, config: dict, seed: int = 0) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in _shapes(family, config).items():
        if len(shape) == 1 and "bias" not in name:  # norm weights
            weights[name] = 1.0 + 0.2 * torch.randn(shape, generator=gen)
        else:
            scale = 0.1 if "bias" in name else 1.0 / math.sqrt(shape[-1])
            weights[name] = scale * torch.randn(shape, generator=gen)
    return weights


def write_published(family: str, folder: Path, seed: int = 0, shards: int = 1) -> tuple[dict, dict]:
    """Write a tiny random checkpoint in the family's published layout; return (config, weights)."""
    config = CONFIGS[family] | TOKENS
    weights = random_weights(family, config, seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    names = list(weights)
    if shards == 1:
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map: dict[str, str] = {}
        for k in range(shards):
            filename = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: weights[n] for n in names[k::shards]}
            save_file(part, str(folder / filename), metadata={"format": "pt"})
            weight_map |= dict.fromkeys(part, filename)
        index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    byte_tokenizer().save_pretrained(str(folder))
    return config, weights


# ---------------------------------------------------------------- naive reference forward


def naive_rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return weight * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def naive_rope(x: Tensor, position: int, base: float, rotary_dim: int, interleaved: bool) -> Tensor:
    """Rotate one head vector. Rotate-half pairs channel i with i + rotary_dim/2; `interleaved`
    (the GPT-J convention, a negative control) pairs 2i with 2i+1."""
    out = x.clone()
    for i in range(rotary_dim // 2):
        angle = position * base ** (-2.0 * i / rotary_dim)
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + rotary_dim // 2)
        out[a] = x[a] * math.cos(angle) - x[b] * math.sin(angle)
        out[b] = x[b] * math.cos(angle) + x[a] * math.sin(angle)
    return out


def naive_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
    """q [L, H, D], k/v [L, KV, D], allowed [L, L] -> [L, H * D], one head and one query at a time."""
    length, heads, dim = q.shape
    group = heads // k.shape[1]
    out = torch.zeros(length, heads, dim, dtype=q.dtype)
    for h in range(heads):
        for i in range(length):
            scores = torch.tensor(
                [
                    float(q[i, h] @ k[j, h // group]) / math.sqrt(dim) if allowed[i, j] else -math.inf
                    for j in range(length)
                ],
                dtype=q.dtype,
            )
            out[i, h] = torch.softmax(scores, 0) @ v[:, h // group]
    return out.reshape(length, heads * dim)


def swiglu(x: Tensor, gate: Tensor, up: Tensor, down: Tensor) -> Tensor:
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


def naive_moe(
    x: Tensor,
    gate: Tensor,
    bias: Tensor,
    experts: list,
    shared: tuple | None,
    k: int,
    n_group: int,
    topk_group: int,
    scale: float,
    group_limited: bool = True,
) -> tuple[Tensor, list[set[int]]]:
    """Every expert on every token; per token an explicit group-limited top-k on the biased
    sigmoid scores and weights from the unbiased ones. Returns (output, chosen experts)."""
    every = torch.stack([swiglu(x, *e) for e in experts])  # [E, T, H]
    num_experts, per_group = gate.shape[0], gate.shape[0] // n_group
    out = torch.zeros_like(x)
    chosen_all = []
    for t in range(x.shape[0]):
        scores = [1.0 / (1.0 + math.exp(-float(gate[e] @ x[t]))) for e in range(num_experts)]
        biased = [s + float(b) for s, b in zip(scores, bias)]
        group_score = [
            sum(sorted(biased[g * per_group : (g + 1) * per_group], reverse=True)[:2]) for g in range(n_group)
        ]
        groups = sorted(range(n_group), key=lambda g: -group_score[g])[: topk_group if group_limited else n_group]
        candidates = [e for e in range(num_experts) if e // per_group in groups]
        chosen = sorted(candidates, key=lambda e: -biased[e])[:k]
        total = sum(scores[e] for e in chosen)
        for e in chosen:
            weight = (scores[e] / total if k > 1 else scores[e]) * scale
            out[t] += weight * every[e, t]
        chosen_all.append(set(chosen))
    if shared is not None:
        out = out + swiglu(x, *shared)
    return out, chosen_all


def naive_logits(
    family: str, c: dict, w: dict[str, Tensor], ids: list[int], allowed: Tensor, variant: str = ""
) -> Tensor:
    """Logits [L, V] of the published architecture, in float64, for token ids under `allowed`.

    variant: "" (faithful), "interleaved_rope", "swap_gate_up" or "grouped_qkv" (reads Bailing's
    fused qkv as per-kv-group [q.., k, v] blocks) -- each a plausible misreading."""
    w = {n: t.double() for n, t in w.items()}
    llada = family == "llada"
    heads, kv = (c["n_heads"], c["n_kv_heads"]) if llada else (c["num_attention_heads"], c["num_key_value_heads"])
    hidden = c["d_model"] if llada else c["hidden_size"]
    dim = c["head_dim"] if family in ("sdar", "llada2") else hidden // heads
    rotary = int(dim * c.get("partial_rotary_factor", 1.0))
    eps, base = c["rms_norm_eps"], float(c["rope_theta"])
    embed = w[
        "model.transformer.wte.weight"
        if llada
        else "model.word_embeddings.weight"
        if family == "llada2"
        else "model.embed_tokens.weight"
    ]
    x = embed[torch.tensor(ids)]
    length = len(ids)
    for i in range(c["n_layers"] if llada else c["num_hidden_layers"]):
        p = f"model.transformer.blocks.{i}." if llada else f"model.layers.{i}."
        h = naive_rms(x, w[p + ("attn_norm.weight" if llada else "input_layernorm.weight")], eps)
        if family == "llada2":
            fused = h @ w[p + "attention.query_key_value.weight"].T
            if variant == "grouped_qkv":
                per = heads // kv + 2
                g = fused.view(length, kv, per, dim)
                q, k, v = g[:, :, :-2].reshape(length, heads, dim), g[:, :, -2], g[:, :, -1]
            else:
                q, k, v = fused.view(length, heads + 2 * kv, dim).split([heads, kv, kv], dim=1)
        else:
            a = "" if llada else "self_attn."
            q, k, v = (
                (h @ w[f"{p}{a}{n}_proj.weight"].T + w.get(f"{p}{a}{n}_proj.bias", 0.0)).view(length, -1, dim)
                for n in "qkv"
            )
        if family in ("sdar", "llada2"):
            qn, kn = (
                ("attention.query_layernorm", "attention.key_layernorm")
                if family == "llada2"
                else ("self_attn.q_norm", "self_attn.k_norm")
            )
            q, k = naive_rms(q, w[p + qn + ".weight"], eps), naive_rms(k, w[p + kn + ".weight"], eps)
        interleaved = variant == "interleaved_rope"
        q = torch.stack(
            [
                torch.stack([naive_rope(q[t, h_], t, base, rotary, interleaved) for h_ in range(heads)])
                for t in range(length)
            ]
        )
        k = torch.stack(
            [
                torch.stack([naive_rope(k[t, h_], t, base, rotary, interleaved) for h_ in range(kv)])
                for t in range(length)
            ]
        )
        out = naive_attention(q, k, v, allowed)
        o_name = "attn_out" if llada else "attention.dense" if family == "llada2" else "self_attn.o_proj"
        x = x + out @ w[f"{p}{o_name}.weight"].T
        h = naive_rms(x, w[p + ("ff_norm.weight" if llada else "post_attention_layernorm.weight")], eps)
        if llada:
            gate, up = w[p + "ff_proj.weight"], w[p + "up_proj.weight"]
            mlp: tuple[Tensor, ...] = (gate, up, w[p + "ff_out.weight"])
        elif f"{p}mlp.gate.weight" in w:
            experts = [
                tuple(w[f"{p}mlp.experts.{j}.{n}_proj.weight"] for n in ("gate", "up", "down"))
                for j in range(c["num_experts"])
            ]
            shared = tuple(w[f"{p}mlp.shared_experts.{n}_proj.weight"] for n in ("gate", "up", "down"))
            if variant == "swap_gate_up":
                experts = [(u, g_, d) for g_, u, d in experts]
                shared = (shared[1], shared[0], shared[2])
            moe, _ = naive_moe(
                h,
                w[p + "mlp.gate.weight"],
                w[p + "mlp.gate.expert_bias"],
                experts,
                shared,
                c["num_experts_per_tok"],
                c["n_group"],
                c["topk_group"],
                c["routed_scaling_factor"],
            )
            x = x + moe
            continue
        else:
            mlp = tuple(w[f"{p}mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
        if variant == "swap_gate_up":
            mlp = (mlp[1], mlp[0], mlp[2])
        x = x + swiglu(h, *mlp)
    x = naive_rms(x, w["model.transformer.ln_f.weight" if llada else "model.norm.weight"], eps)
    tied = c.get("weight_tying") if llada else c.get("tie_word_embeddings")
    head = embed if tied else w["model.transformer.ff_out.weight" if llada else "lm_head.weight"]
    return x @ head.T


@pytest.fixture
def reference():
    """The naive reference functions, as a namespace (conftest modules are not importable)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        logits=naive_logits, moe=naive_moe, write_published=write_published, configs=CONFIGS, swiglu=swiglu
    )

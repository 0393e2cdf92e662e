"""One compact transformer that covers the four target families.

Llama/OLMo (LLaDA), Qwen2 (Dream), Qwen3 (SDAR) and Bailing-MoE (LLaDA2) blocks differ only in a few
switches: qkv bias, per-head q/k RMSNorm, partial rotary embeddings, and a sigmoid-routed MoE with a
shared expert. The attention pattern is not decided here: callers pass an explicit boolean mask, so the
same weights serve bidirectional, block-causal and cached-prefix evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.targets.adapter import Gate
from harness.targets.kv_store import LayerCache, PassCache

KV = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    num_shared_experts: int = 1
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    first_k_dense_replace: int = 0
    """The first k layers use a dense SwiGLU instead of the MoE."""


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    rms_norm_eps: float = 1e-6
    rope_full_precision: bool = False
    """Rotate q/k in float32 and cast back (LLaDA), instead of rotating in the model dtype with
    cos/sin cast to it (Qwen/Bailing). The two only differ below float32."""
    qkv_bias: bool = False
    qk_norm: bool = False
    tie_embeddings: bool = False
    moe: MoEConfig | None = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        compute = torch.promote_types(x.dtype, torch.float32)
        h = x.to(compute)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SigmoidMoE(nn.Module):
    """DeepSeek-V3 / Bailing-V2 style MoE: sigmoid scores, bias-corrected group-limited top-k."""

    expert_bias: Tensor  # a buffer (register_buffer)

    def __init__(self, hidden: int, moe: MoEConfig):
        super().__init__()
        self.cfg = moe
        self.gate = nn.Linear(hidden, moe.num_experts, bias=False)
        self.register_buffer("expert_bias", torch.zeros(moe.num_experts))
        self.experts = nn.ModuleList(SwiGLU(hidden, moe.moe_intermediate_size) for _ in range(moe.num_experts))
        self.shared = (
            SwiGLU(hidden, moe.moe_intermediate_size * moe.num_shared_experts) if moe.num_shared_experts else None
        )

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Return (expert indices [T, k], weights [T, k]) for flattened tokens x [T, H].

        As the published LLaDA2 gate: the router runs in (at least) float32; the bias only steers
        the choice (group score = sum of a group's two best biased scores, then top-k among the
        experts of the best `topk_group` groups); the weights are the unbiased sigmoid scores,
        renormalised when k > 1, times `routed_scaling_factor`.
        """
        cfg = self.cfg
        compute = torch.promote_types(x.dtype, torch.float32)
        scores = torch.sigmoid(F.linear(x.to(compute), self.gate.weight.to(compute)))
        biased = scores + self.expert_bias.to(compute)
        tokens = x.shape[0]
        per_group = cfg.num_experts // cfg.n_group
        grouped = biased.view(tokens, cfg.n_group, per_group)
        group_scores = grouped.topk(min(2, per_group), dim=-1).values.sum(-1)
        top_groups = group_scores.topk(cfg.topk_group, dim=-1).indices
        group_mask = torch.zeros_like(group_scores).scatter_(1, top_groups, 1.0)
        allowed = group_mask.unsqueeze(-1).expand_as(grouped).reshape(tokens, -1).bool()
        indices = biased.masked_fill(~allowed, float("-inf")).topk(cfg.num_experts_per_tok, -1).indices
        weights = scores.gather(1, indices)
        if cfg.num_experts_per_tok > 1:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return indices, weights * cfg.routed_scaling_factor

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        indices, weights = self.route(flat)
        # Weighted expert outputs are summed in the router precision, then cast back (as published).
        routed = torch.zeros(flat.shape, dtype=weights.dtype, device=flat.device)
        for expert_id, expert in enumerate(self.experts):
            token_ids, slot = (indices == expert_id).nonzero(as_tuple=True)
            if token_ids.numel():
                contribution = expert(flat[token_ids]).to(weights.dtype) * weights[token_ids, slot, None]
                routed.index_add_(0, token_ids, contribution)
        out = routed.to(flat.dtype)
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(shape)


def rotary_tables(cfg: ModelConfig, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos/sin [L, rotary_dim] (or [N, 1, L, rotary_dim] for per-row positions) in (at least)
    float32, computed with the published op order.

    The published models compute inverse frequencies and angles in float32; at positions in the
    thousands float32 angles differ from exact ones by ~1e-4 rad, so matching that order matters
    more than extra precision. Float64 models (exactness mode) compute in float64.
    """
    compute = torch.promote_types(dtype, torch.float32)
    rotary_dim = int(cfg.head_dim * cfg.partial_rotary_factor)
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(compute) / rotary_dim
    inv_freq = 1.0 / (cfg.rope_theta**exponent)
    angles = positions.to(compute)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    if angles.ndim == 3:  # per-row positions [N, L]: broadcast over heads
        angles = angles[:, None]
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, full_precision: bool) -> Tensor:
    """Rotate the first `cos.shape[-1]` channels of each head (rotate-half convention: channel i
    pairs with channel i + rotary_dim/2, as in Llama/Qwen/OLMo, not interleaved pairs)."""
    compute = cos.dtype if full_precision else x.dtype
    h, cos, sin = x.to(compute), cos.to(compute), sin.to(compute)
    rotary_dim = cos.shape[-1]
    rot, keep = h[..., :rotary_dim], h[..., rotary_dim:]
    first, second = rot.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return torch.cat([rot * cos + rotated * sin, keep], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: Tensor | None, past: KV | LayerCache | None
    ) -> tuple[Tensor, KV]:
        cfg = self.cfg
        rows, length, _ = x.shape
        q = self.q_proj(x).view(rows, length, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(rows, length, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(rows, length, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:  # both or neither (cfg.qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        full = cfg.rope_full_precision
        q, k = apply_rotary(q, cos, sin, full), apply_rotary(k, cos, sin, full)
        new_kv = (k, v)
        if isinstance(past, LayerCache):  # decoding: the keys go to the store, the rows read it in place
            k, v = past.update(k, v)
        elif past is not None:  # training: a prefix computed with gradients
            past_k, past_v = (t.expand(rows, -1, -1, -1) for t in past)
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        grouped = cfg.num_heads != cfg.num_kv_heads  # query heads share key/value heads without copies
        scale = 1.0 / math.sqrt(cfg.head_dim)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, scale=scale, enable_gqa=grouped)
        return self.o_proj(out.transpose(1, 2).reshape(rows, length, -1)), new_kv


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_index: int):
        super().__init__()
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.post_attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        moe = cfg.moe if cfg.moe is not None and layer_index >= cfg.moe.first_k_dense_replace else None
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size) if moe is None else SigmoidMoE(cfg.hidden_size, moe)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: Tensor | None, past: KV | LayerCache | None
    ) -> tuple[Tensor, KV]:
        attn_out, kv = self.attn(self.input_norm(x), cos, sin, attend, past)
        h = x + attn_out
        return h + self.mlp(self.post_attn_norm(h)), kv


class DLMTransformer(nn.Module):
    """Token ids -> logits for every position, under an explicit attention mask."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.adapter_gate: Gate | None = None
        """Set when a gated adapter is attached (harness/targets/adapter.py: converted targets)."""

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor,
        attend: Tensor | None,
        past: list[KV] | PassCache | None = None,
        adapted: Tensor | None = None,
    ) -> tuple[Tensor, list[KV]]:
        """Evaluate `input_ids` [N, L] at absolute `positions` [L] (or [N, L] per row).

        `attend` [L, P + L] (True = may attend) covers the P cached prefix keys in `past` (one row,
        shared by all N rows, or N rows; or a `PassCache` over a key/value store, which stores the new
        keys and hands back the rows' slots) followed by the L new keys, or [N, 1, L, P + L] per row;
        None means full attention. Returns logits [N, L, V] and, per layer, the keys/values of the L new
        tokens, so a caller can extend its prefix cache. `adapted` [N, L] (bool) turns an attached
        adapter on at those rows; without one it must be None.
        """
        hidden, new_kv = self.hidden(input_ids, positions, attend, past, adapted)
        return self.lm_head(hidden), new_kv

    def hidden(
        self,
        input_ids: Tensor,
        positions: Tensor,
        attend: Tensor | None,
        past: list[KV] | PassCache | None = None,
        adapted: Tensor | None = None,
    ) -> tuple[Tensor, list[KV]]:
        """`forward` without the output head: the final-normed hidden states [N, L, H], for callers that
        need logits at a few rows only (training; block-causal passes, whose stored rows predict
        nothing)."""
        if adapted is not None and self.adapter_gate is None:
            raise ValueError("adapted rows given, but the model has no adapter")
        if self.adapter_gate is not None:
            self.adapter_gate.mask = adapted
        x = self.embed_tokens(input_ids)
        cos, sin = rotary_tables(self.cfg, positions, x.dtype)
        new_kv: list[KV] = []
        for index, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, attend, past[index] if past else None)
            new_kv.append(kv)
        return self.norm(x), new_kv

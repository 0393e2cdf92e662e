"""The compact transformer: block-causal masking and the sigmoid MoE, against explicit references."""

from __future__ import annotations

import pytest
import torch

from harness.targets.model import MoEConfig, SigmoidMoE, rotary_tables
from harness.targets.registry import load_target

BLOCK, BLOCKS = 4, 3


def block_causal(length: int) -> torch.Tensor:
    ids = torch.arange(length) // BLOCK
    return ids[None, :] <= ids[:, None]


@pytest.mark.parametrize("family", ["sdar", "llada2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_block_causal_attention_is_bidirectional_attention_over_each_prefix(family, dtype):
    """In one attention layer, a query of block j under the block-causal mask gets exactly the
    bidirectional attention over blocks 0..j."""
    model = load_target(f"tiny-random:{family}:1").model.to(dtype)
    attention, length = model.layers[0].attn, BLOCK * BLOCKS
    x = torch.randn(2, length, model.cfg.hidden_size, dtype=dtype, generator=torch.Generator().manual_seed(0))
    cos, sin = rotary_tables(model.cfg, torch.arange(length), dtype)
    masked, _ = attention(x, cos, sin, block_causal(length), None)
    unmasked, _ = attention(x, cos, sin, None, None)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    for j in range(BLOCKS):
        end = (j + 1) * BLOCK
        prefix, _ = attention(x[:, :end], cos[:end], sin[:end], None, None)
        assert (masked[:, j * BLOCK : end] - prefix[:, j * BLOCK : end]).abs().max() <= tolerance
        if j < BLOCKS - 1:  # negative control: without the mask, block j sees later blocks
            assert (unmasked[:, j * BLOCK : end] - prefix[:, j * BLOCK : end]).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["sdar", "llada2"])
def test_block_causal_logits_depend_on_own_and_earlier_blocks_only(family):
    model = load_target(f"tiny-random:{family}:1").model.double()
    length, gen = BLOCK * BLOCKS, torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (1, length), generator=gen)
    positions, mask = torch.arange(length), block_causal(length)
    logits, _ = model(ids, positions, mask)
    for j in range(BLOCKS):
        end = (j + 1) * BLOCK
        later = ids.clone()
        later[:, end:] = torch.randint(0, 256, (1, length - end), generator=gen)
        changed, _ = model(later, positions, mask)
        assert (changed[:, :end] - logits[:, :end]).abs().max() <= 1e-12
        prefix, _ = model(ids[:, :end], positions[:end], mask[:end, :end])
        assert (prefix - logits[:, :end]).abs().max() <= 1e-12
        inside = ids.clone()
        inside[:, end - 1] = (inside[:, end - 1] + 1) % 256  # last token of block j
        moved, _ = model(inside, positions, mask)
        assert (moved[:, j * BLOCK] - logits[:, j * BLOCK]).abs().max() > 1e-3  # bidirectional


def _moe(k: int) -> SigmoidMoE:
    cfg = MoEConfig(
        num_experts=8,
        num_experts_per_tok=k,
        moe_intermediate_size=8,
        num_shared_experts=1,
        n_group=4,
        topk_group=2,
        routed_scaling_factor=2.5,
    )
    with torch.random.fork_rng():
        torch.manual_seed(k)
        moe = SigmoidMoE(16, cfg).double()
        moe.expert_bias.normal_(0.0, 0.5)  # large enough to steer the choice
    return moe


@pytest.mark.parametrize("k", [1, 2, 3])
def test_moe_matches_dense_reference(k, reference):
    moe = _moe(k)
    x = torch.randn(40, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    experts = [(e.gate_proj.weight, e.up_proj.weight, e.down_proj.weight) for e in moe.experts]
    shared = (moe.shared.gate_proj.weight, moe.shared.up_proj.weight, moe.shared.down_proj.weight)
    args = (x, moe.gate.weight, moe.expert_bias, experts, shared, k, 4, 2, 2.5)
    with torch.no_grad():
        expected, chosen = reference.moe(*args)
        indices, _ = moe.route(x)
        out = moe(x)
        _, plain_top_k = reference.moe(*args, group_limited=False)
    assert [set(row.tolist()) for row in indices] == chosen
    assert (out - expected).abs().max() <= 1e-12
    if k > 1:  # negative control: the group limit binds for some tokens
        assert plain_top_k != chosen


def test_moe_routing_ignores_batch_composition():
    """A token's experts and output do not depend on the other tokens in the batch."""
    moe = _moe(2)
    x = torch.randn(12, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        together = moe(x)
        alone = torch.cat([moe(x[i : i + 1]) for i in range(12)])
    assert (together - alone).abs().max() <= 1e-12

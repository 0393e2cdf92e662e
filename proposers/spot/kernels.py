"""SpotNet's encoder in inference: the kernels `nn.TransformerEncoder` runs, called with less work.

Why: SPOT's tree search calls its network a few times per target pass with a few rows, and on one
CPU thread that network costs about as much as the tiny zoo targets' pass (docs/throughput.md).
Two costs there are not the network's arithmetic:
- `nn.TransformerEncoder` in inference runs each layer's fused kernel
  (`torch._transformer_encoder_layer_fwd`) after Python checks that cost 0.1-0.2 ms per call of 1-4
  rows of 32 positions (a tenth to a quarter of the encoder's time on one CPU thread);
  `encoder_layers` calls that kernel directly, under the same conditions (no hooks are attached to
  SpotNet's layers);
- the search reads the network's outputs only at masked positions (the position head is -inf at
  committed ones, and children are masked positions), yet the last layer's feed-forward block runs
  at every position. `last_layer_rows` runs it (and the attention's output projection) only on the
  rows asked for; the attention itself still reads every position.

Both give the fused kernel's values bit for bit: the same operations in the same order, and the
matrix products of the row subset have at least `MIN_ROWS` rows (with fewer, MKL on this project's
CPU picks other kernels whose last bits differ; tests/proposers/spot/test_spot.py compares on many
shapes). Another BLAS or device may round a subset otherwise, as batching rows already can
(proposers/spot/tree.py): a near-tie within ~1e-6 could then order two frontier entries otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

MIN_ROWS = 4
"""Fewest rows `last_layer_rows` multiplies; a smaller subset runs the whole fused layer instead."""
RELU = 1
"""`TransformerEncoderLayer.activation_relu_or_gelu` of a ReLU layer (every SpotNet's)."""


def fused_path() -> bool:
    """Whether `nn.TransformerEncoderLayer` would take its fused fast path now (the conditions that
    do not hold for every SpotNet in eval mode: no gradient, no autocast, fast path enabled)."""
    return not torch.is_grad_enabled() and not torch.is_autocast_enabled() and torch.backends.mha.get_fastpath_enabled()


def fused_layer(layer: nn.TransformerEncoderLayer, h: Tensor) -> Tensor:
    """`layer(h)` on its fast path: the fused kernel with no mask."""
    attention = layer.self_attn
    return torch._transformer_encoder_layer_fwd(
        h,
        attention.embed_dim,
        attention.num_heads,
        attention.in_proj_weight,
        attention.in_proj_bias,
        attention.out_proj.weight,
        attention.out_proj.bias,
        layer.activation_relu_or_gelu == 2,
        layer.norm_first,
        layer.norm1.eps,
        layer.norm1.weight,
        layer.norm1.bias,
        layer.norm2.weight,
        layer.norm2.bias,
        layer.linear1.weight,
        layer.linear1.bias,
        layer.linear2.weight,
        layer.linear2.bias,
        None,
        None,
    )


def last_layer_rows(layer: nn.TransformerEncoderLayer, h: Tensor, rows: Tensor) -> Tensor:
    """`fused_layer(layer, h)` where `rows` [N, B] is True; elsewhere `h` unchanged (not the layer's
    output: read only the rows asked for). A pre-norm ReLU layer, as in SpotNet."""
    n, size, width = h.shape
    attention = layer.self_attn
    normed = F.layer_norm(h, (width,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
    qkv = torch.mm(normed.reshape(n * size, width), attention.in_proj_weight.t()).view(n, size, 3 * width)
    q, k, v = torch._transform_bias_rescale_qkv(qkv, attention.in_proj_bias, attention.num_heads)
    weights = torch.bmm(q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2)).softmax(-1)
    context = torch.bmm(weights, v.flatten(0, 1)).view(n, attention.num_heads, size, -1).transpose(1, 2)
    x = torch.addmm(attention.out_proj.bias, context.reshape(n, size, width)[rows], attention.out_proj.weight.t())
    x = x + h[rows]
    normed = F.layer_norm(x, (width,), layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)
    hidden = torch._addmm_activation(layer.linear1.bias, normed, layer.linear1.weight.t())
    return h.index_put((rows,), torch.addmm(layer.linear2.bias, hidden, layer.linear2.weight.t()) + x)


def encoder_layers(encoder: nn.TransformerEncoder, h: Tensor, rows: Tensor | None = None) -> Tensor:
    """`encoder(h)` for an encoder in eval mode under `fused_path()`; with `rows` [N, B], only those
    positions of the output are the encoder's (`last_layer_rows`)."""
    layers = list(encoder.layers)
    last = layers.pop()
    for layer in layers:
        h = fused_layer(layer, h)
    subset = (
        rows is not None and last.norm_first and last.activation_relu_or_gelu == RELU and int(rows.sum()) >= MIN_ROWS
    )
    h = last_layer_rows(last, h, rows) if subset and rows is not None else fused_layer(last, h)
    return h if encoder.norm is None else encoder.norm(h)

"""SDAR's masked-block diffusion on the absolute block grid, laid out for the converted family's
conventions (harness/targets/converted.py). A batch is two forward passes:

1. the clean sequence through the frozen base, causal, adapter off, with no autograd: the keys and
   values the decoder will hold in its cache (this pass is what the adapter never changes);
2. a noisy copy of the answer's blocks, adapter on: each block's answer positions are masked with a
   rate t ~ U(eps, 1) drawn per block, and the block attends to the clean keys before it and to
   itself. Row p predicts token p+1 (shifted logits) where p+1 is masked and in the same block; the
   first token of a block is predicted by the clean row before it, which is the base's and is not
   trained. The cross-entropy is weighted by 1/t and averaged over the answer positions a block's
   rows predict, and is computed at the masked rows only.

Only the adapter (and nothing of the clean pass) enters autograd, and the output head runs only at
masked rows: that is what makes a step cheap (benchmarks/convert_step.py measures it against the
one-forward two-stream layout with the adapter on every row). Every sequence ends with EOS, padded
with EOS to the end of its block, as decoding fills a block after the answer ends.

A converted target's training step (`harness.training.convert`) and the benchmarks of its layout
(benchmarks/convert_step.py, benchmarks/convert_conventions.py) read a batch through `layout`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.targets.target import DLMTarget

MIN_MASK_RATE = 1e-3


@dataclass
class Sequence:
    tokens: list[int]
    """Prompt, answer, EOS, then EOS to the end of the block: the last trained block ends here."""
    prompt_length: int


@dataclass
class Batch:
    clean_ids: Tensor  # [N, C] the clean context (positions 0..C-1)
    clean_attend: Tensor  # [N, 1, C, C]
    noisy_ids: Tensor  # [N, L] the noisy copy of the answer's blocks
    noisy_positions: Tensor  # [N, L]
    noisy_attend: Tensor  # [N, 1, L, C + L]
    targets: Tensor  # [N, L] the token row p predicts (p+1), -100 where nothing is trained
    weights: Tensor  # [N, L] 1/t of the row's block where trained
    predicted: int
    """Answer positions the noisy rows predict, masked or not: the loss's denominator."""


def layout(batch: list[Sequence], size: int, mask_id: int, generator: torch.Generator) -> Batch:
    """Mask each block of each answer at its own rate and lay out both passes (module docstring)."""
    starts = [s.prompt_length - s.prompt_length % size for s in batch]  # the block holding the prompt's end
    clean_len = max(max(len(s.tokens) - size for s in batch), 1)
    noisy_len = max(len(s.tokens) - start for s, start in zip(batch, starts))
    rows = len(batch)
    clean_ids = torch.full((rows, clean_len), mask_id, dtype=torch.long)
    clean_attend = torch.zeros((rows, 1, clean_len, clean_len), dtype=torch.bool)
    noisy_ids = torch.full((rows, noisy_len), mask_id, dtype=torch.long)
    noisy_positions = torch.zeros((rows, noisy_len), dtype=torch.long)
    noisy_attend = torch.zeros((rows, 1, noisy_len, clean_len + noisy_len), dtype=torch.bool)
    targets = torch.full((rows, noisy_len), -100, dtype=torch.long)
    weights = torch.zeros((rows, noisy_len))
    causal = torch.ones(clean_len, clean_len, dtype=torch.bool).tril()
    predicted = 0
    for row, (seq, start) in enumerate(zip(batch, starts)):
        tokens = torch.tensor(seq.tokens)
        context = len(tokens) - size
        clean_ids[row, :context] = tokens[:context]
        clean_attend[row, 0] = causal
        span = len(tokens) - start
        positions = torch.arange(start, len(tokens))
        blocks = positions // size
        rates = MIN_MASK_RATE + (1 - MIN_MASK_RATE) * torch.rand(int(blocks[-1]) + 1, generator=generator)
        rate = rates[blocks]
        answer = positions >= seq.prompt_length
        masked = answer & (torch.rand(span, generator=generator) < rate)
        noisy_ids[row, :span] = torch.where(masked, mask_id, tokens[start:])
        noisy_positions[row, :span] = positions
        noisy_positions[row, span:] = len(tokens)  # padding rows: past the sequence, attending themselves
        keys = torch.arange(clean_len)
        noisy_attend[row, 0, :span, :clean_len] = (keys[None, :] < (blocks * size)[:, None]) & (keys < context)
        same_block = blocks[None, :] == blocks[:, None]
        noisy_attend[row, 0, :span, clean_len : clean_len + span] = same_block
        pad = torch.arange(span, noisy_len)
        noisy_attend[row, 0, pad, clean_len + pad] = True
        # row p predicts p+1 when p+1 is an answer position of p's block
        follows = (positions[1:] // size == blocks[:-1]) & answer[1:]
        predicted += int(follows.sum())
        trained = follows & masked[1:]
        targets[row, : span - 1] = torch.where(trained, tokens[start + 1 :], -100)
        weights[row, : span - 1] = torch.where(trained, 1.0 / rate[1:], 0.0)
    return Batch(clean_ids, clean_attend, noisy_ids, noisy_positions, noisy_attend, targets, weights, max(predicted, 1))


def diffusion_loss(target: DLMTarget, batch: Batch) -> Tensor:
    model = target.model
    clean_positions = torch.arange(batch.clean_ids.shape[1])
    with torch.no_grad():
        _, clean_kv = model.hidden(batch.clean_ids, clean_positions, batch.clean_attend)
    adapted = torch.ones_like(batch.noisy_ids, dtype=torch.bool)
    hidden, _ = model.hidden(batch.noisy_ids, batch.noisy_positions, batch.noisy_attend, clean_kv, adapted)
    trained = batch.targets >= 0
    logits = model.lm_head(hidden[trained]).float()
    per_token = F.cross_entropy(logits, batch.targets[trained], reduction="none")
    return (per_token * batch.weights[trained]).sum() / batch.predicted

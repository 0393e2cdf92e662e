"""Masked-diffusion training objectives, matched to how `TargetSession` evaluates each family.

Full-attention families (LLaDA, Dream) use LLaDA's SFT objective: the prompt stays clean, every
answer token (the answer is padded with EOS to a fixed length, so the model learns to fill the tail
with EOS) is masked with probability t ~ U(eps, 1) drawn per sequence, and the cross-entropy of the
masked tokens is weighted by 1/t and normalised by the answer length. Dream predicts token i at
position i-1 (shifted logits).

Block-causal families (SDAR, LLaDA2) use the block-diffusion variant with two streams in one forward
pass: the clean sequence (block-causal, as the KV cache will hold it at inference) followed by a noisy
copy of the answer's blocks in which each block attends to the clean blocks before it and to itself.
Blocks lie on absolute positions from 0, as `TargetSession` and the families' published `generate`
lay them: the noisy copy starts at the block holding the prompt's last token, whose prompt positions
stay clean in it. Every answer block is trained in every sequence, so no signal is wasted on clean
prefixes. The answer is cut at the fixed answer length, so a last block that runs past it is trained
on its first positions only (decoding of gen_length <= answer length never reads the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.targets.families import FamilySpec
from harness.targets.model import DLMTransformer

MIN_MASK_RATE = 1e-3


@dataclass
class Example:
    prompt: list[int]
    answer: list[int]
    """Answer tokens padded with EOS to the fixed answer length (a multiple of the block length)."""


@dataclass
class Batch:
    input_ids: Tensor  # [N, L]
    positions: Tensor  # [N, L]
    attend: Tensor  # [N, 1, L, L] bool
    targets: Tensor  # [N, L] token to predict at each position of `input_ids`, -100 where none
    weights: Tensor  # [N, L] loss weight per position (1/t / answer length on masked tokens)


def build_batch(
    examples: list[Example],
    family: FamilySpec,
    mask_id: int,
    pad_id: int,
    block_length: int,
    generator: torch.Generator,
) -> Batch:
    """Noise a batch of examples (mask rate t per sequence) and lay it out for one forward pass."""
    answer_len = len(examples[0].answer)
    rates = MIN_MASK_RATE + (1 - MIN_MASK_RATE) * torch.rand(len(examples), generator=generator)
    masks = torch.rand(len(examples), answer_len, generator=generator) < rates[:, None]
    masks[torch.arange(len(examples)), torch.randint(answer_len, (len(examples),), generator=generator)] = True
    return layout_batch(examples, masks, rates, family, mask_id, pad_id, block_length)


def layout_batch(
    examples: list[Example],
    masks: Tensor,
    rates: Tensor,
    family: FamilySpec,
    mask_id: int,
    pad_id: int,
    block_length: int,
) -> Batch:
    """Inputs, positions, attention masks and weighted targets for answers masked where `masks`."""
    two_stream = family.attention == "block_causal"
    answer_len = len(examples[0].answer)
    prompt_max = max(len(e.prompt) for e in examples)
    tails = [len(e.prompt) % block_length if two_stream else 0 for e in examples]
    length = prompt_max + answer_len + (answer_len + max(tails) if two_stream else 0)
    rows = len(examples)
    input_ids = torch.full((rows, length), pad_id, dtype=torch.long)
    positions = torch.zeros((rows, length), dtype=torch.long)
    attend = torch.zeros((rows, 1, length, length), dtype=torch.bool)
    targets = torch.full((rows, length), -100, dtype=torch.long)
    weights = torch.zeros((rows, length))
    for row, (example, masked, rate, tail) in enumerate(zip(examples, masks, rates, tails)):
        prompt, answer = torch.tensor(example.prompt), torch.tensor(example.answer)
        clean_len = len(prompt) + answer_len
        noisy = torch.where(masked, mask_id, answer)
        weight = masked.float() / rate / answer_len
        if two_stream:
            origin = len(prompt) - tail  # the noisy copy: the prompt's tail (clean), then the noisy answer
            start, end = clean_len, 2 * clean_len - origin
            input_ids[row, :clean_len] = torch.cat([prompt, answer])
            input_ids[row, start:end] = torch.cat([prompt[origin:], noisy])
            clean_pos = torch.arange(clean_len)
            positions[row, :clean_len] = clean_pos
            positions[row, start:end] = clean_pos[origin:]
            ids = clean_pos // block_length
            noisy_ids = ids[origin:]
            attend[row, 0, :clean_len, :clean_len] = ids[None, :] <= ids[:, None]
            noisy_rows = slice(start, end)
            attend[row, 0, noisy_rows, :clean_len] = ids[None, :] < noisy_ids[:, None]
            attend[row, 0, noisy_rows, noisy_rows] = noisy_ids[None, :] == noisy_ids[:, None]
            answer_rows = slice(start + tail, end)
            targets[row, answer_rows] = torch.where(masked, answer, -100)
            weights[row, answer_rows] = weight
        else:
            input_ids[row, :clean_len] = torch.cat([prompt, noisy])
            positions[row, :clean_len] = torch.arange(clean_len)
            attend[row, 0, :clean_len, :clean_len] = True
            shift = 1 if family.shifted_logits else 0
            answer_slots = slice(len(prompt) - shift, clean_len - shift)
            targets[row, answer_slots] = torch.where(masked, answer, -100)
            weights[row, answer_slots] = weight
        padding = ~attend[row, 0].any(-1)
        attend[row, 0, padding, padding] = True
    return Batch(input_ids, positions, attend, targets, weights)


def diffusion_loss(model: DLMTransformer, batch: Batch) -> Tensor:
    logits, _ = model(batch.input_ids, batch.positions, batch.attend)
    per_token = F.cross_entropy(
        logits.flatten(0, 1).float(), batch.targets.flatten(), ignore_index=-100, reduction="none"
    )
    return (per_token * batch.weights.flatten()).sum() / batch.input_ids.shape[0]

"""Tokens/s of a conversion training step (harness/training/masked_blocks.py), three layouts side by side
in one process on the same batches:

- `two-stream`: SDAR's published layout, clean and noisy streams in one forward, the adapter on at
  every row, autograd through both streams, logits at every noisy row;
- `gated`: the clean pass through the frozen base without autograd, the noisy pass adapted, logits
  at every noisy row;
- `gated+rows`: the same with the output head run at the trained (masked) rows only: what
  `spotbench convert` trains with at `dtype: float32`;
- `gated+rows bf16`: the same at `dtype: bfloat16` (frozen base in bfloat16, autocast), the last
  variant run since it converts the base.

Each variant runs forward, backward and an optimizer step; tokens are the batch's sequence tokens.

    python benchmarks/convert_step.py --recipe zoo/recipes/sdar-smollm2.yaml --steps 3
"""

from __future__ import annotations

import argparse
import functools

import torch
import torch.nn.functional as F
from step_timing import time_variants

from harness.targets import adapter
from harness.targets.converted import convert
from harness.targets.registry import load_target
from harness.training.convert import ConvertRecipe, sequences
from harness.training.masked_blocks import Batch, diffusion_loss, layout
from tasks.registry import train_answers


def two_stream_loss(target, batch: Batch, rows_only: bool = False) -> torch.Tensor:
    clean, noisy = batch.clean_ids, batch.noisy_ids
    n, c = clean.shape
    length = noisy.shape[1]
    ids = torch.cat([clean, noisy], dim=1)
    positions = torch.cat([torch.arange(c).expand(n, -1), batch.noisy_positions], dim=1)
    attend = torch.zeros(n, 1, c + length, c + length, dtype=torch.bool)
    attend[:, :, :c, :c] = batch.clean_attend
    attend[:, :, c:, :] = batch.noisy_attend
    hidden, _ = target.model.hidden(ids, positions, attend, None, torch.ones_like(ids, dtype=torch.bool))
    logits = target.model.lm_head(hidden[:, c:]).float()
    per_token = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100, reduction="none")
    return (per_token * batch.weights.flatten()).sum() / batch.predicted


def gated_all_rows_loss(target, batch: Batch) -> torch.Tensor:
    model = target.model
    with torch.no_grad():
        _, kv = model.hidden(batch.clean_ids, torch.arange(batch.clean_ids.shape[1]), batch.clean_attend)
    hidden, _ = model.hidden(
        batch.noisy_ids,
        batch.noisy_positions,
        batch.noisy_attend,
        kv,
        torch.ones_like(batch.noisy_ids, dtype=torch.bool),
    )
    logits = model.lm_head(hidden).float()
    per_token = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100, reduction="none")
    return (per_token * batch.weights.flatten()).sum() / batch.predicted


VARIANTS = {
    "two-stream": two_stream_loss,
    "gated": gated_all_rows_loss,
    "gated+rows": diffusion_loss,
    "gated+rows bf16": diffusion_loss,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="zoo/recipes/sdar-smollm2.yaml")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant (after one warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = ConvertRecipe.load(args.recipe)
    base = load_target(recipe.base)
    pairs = [p for name in recipe.tasks for p in train_answers([name], base.tokenizer, recipe.samples_per_task)[:64]]
    data = sequences(pairs, recipe, base.eos_id)
    target = convert(base, recipe.mask_id, recipe.rank, recipe.alpha)
    parameters = list(adapter.lora_state(target.model).values())
    optimizer = torch.optim.AdamW(parameters, lr=1e-4)
    generator = torch.Generator().manual_seed(0)
    batches = [data[i :: args.steps + 1][: recipe.batch_size] for i in range(args.steps + 1)]
    laid = [layout(b, recipe.block_length, recipe.mask_id, generator) for b in batches]
    tokens = sum(len(s.tokens) for b in batches[1:] for s in b)
    time_variants(
        {name: functools.partial(loss_fn, target) for name, loss_fn in VARIANTS.items()},
        laid,
        target.model,
        target.device,
        optimizer,
        tokens,
    )


if __name__ == "__main__":
    main()

"""Tokens/s of a Psi-Spec drafter training step (proposers/psi/training.py), three layouts side by
side in one process on the same batches:

- `one-forward`: clean and noisy rows in one forward with the block mask, autograd through both
  (the clean rows carry the gated-off LoRA branch, so they enter the graph);
- `two-pass`: the clean rows through the frozen base outside autograd, then the noisy rows over
  their cached keys/values: what `spotbench train-drafter` trains with at `dtype: float32`;
- `two-pass bf16`: the same at `dtype: bfloat16` (frozen base in bfloat16, autocast), run last
  since it converts the base.

Each variant runs forward, backward and an optimizer step; tokens are the batch's sequence tokens
(prompt and response).

    python benchmarks/drafter_step.py --recipe zoo/drafters/psi-smollm2.yaml --steps 2 --threads 1
"""

from __future__ import annotations

import argparse
import functools

import torch
from step_timing import time_variants

from harness.targets.registry import load_target
from proposers.psi.lora import GatedLoRAModel
from proposers.psi.training import DrafterRecipe, Layout, layout, probabilities, training_data, tv_loss
from tasks.registry import train_answers


def one_forward_loss(drafter: GatedLoRAModel, batch: Layout) -> torch.Tensor:
    n, width = batch.clean_ids.shape
    rows = batch.noisy_ids.shape[1]
    ids = torch.cat([batch.clean_ids, batch.noisy_ids], dim=1)
    positions = torch.cat([batch.clean_positions, batch.noisy_positions], dim=1)
    allowed = torch.zeros(n, width + rows, width + rows, dtype=torch.bool)
    allowed[:, :width, :width] = torch.ones(width, width, dtype=torch.bool).tril()
    allowed[:, width:] = batch.noisy_allowed
    gate = torch.zeros(n, width + rows, dtype=torch.bool)
    gate[:, width:] = True
    dtype = drafter.model.get_output_embeddings().weight.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    hidden = drafter.hidden(gate, input_ids=ids, position_ids=positions, attention_mask=mask[:, None])
    head = drafter.model.get_output_embeddings()
    with torch.no_grad():
        teacher = probabilities(head(hidden[batch.teacher[:, 0], batch.teacher[:, 1]]))
    student = probabilities(head(hidden[batch.student[:, 0], width + batch.student[:, 1]]))
    return (student - teacher).abs().sum(-1).mean()


VARIANTS = {"one-forward": one_forward_loss, "two-pass": tv_loss, "two-pass bf16": tv_loss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="zoo/drafters/psi-smollm2.yaml")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per variant (after one warm-up)")
    parser.add_argument("--block", type=int, default=4, help="noisy block size")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = DrafterRecipe.load(args.recipe)
    target = load_target(recipe.base)
    pairs = train_answers(recipe.tasks, target.tokenizer, recipe.samples_per_task)
    training, _ = training_data(recipe, pairs[:256], target.eos_id)
    drafter = GatedLoRAModel(target.model, recipe.rank, recipe.alpha)
    parameters = list(drafter.lora_state().values())
    optimizer = torch.optim.AdamW(parameters, lr=1e-4)
    generator = torch.Generator().manual_seed(0)
    batches = [training[i * recipe.batch_size : (i + 1) * recipe.batch_size] for i in range(args.steps + 1)]
    pad = target.tokenizer.pad_token_id or 0
    laid = [layout(b, args.block, target.vocab_size, pad, generator) for b in batches]
    tokens = sum(len(s.prompt) + len(s.response) for b in batches[1:] for s in b)
    time_variants(
        {name: functools.partial(loss_fn, drafter) for name, loss_fn in VARIANTS.items()},
        laid,
        drafter.model,
        target.device,
        optimizer,
        tokens,
    )


if __name__ == "__main__":
    main()

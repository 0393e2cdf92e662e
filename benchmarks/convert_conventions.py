"""Which logit convention converts an AR LM best: the step-0 loss of each on held-out sequences.

A converted target starts as its base with a zero adapter (harness/targets/converted.py). Under the
shifted convention (Dream's: row p-1 predicts token p) the row that predicts a block's first token is
a clean row, the base's own next-token prediction; under the unshifted one (SDAR's: row p predicts
token p) every masked token is predicted from its mask embedding's row. This prints, on the recipe's
held-out train-split sequences with one fixed masking, the mean cross-entropy of the masked answer
tokens under each convention, before any training, and by position in the block.

    python benchmarks/convert_conventions.py --recipe zoo/recipes/sdar-smollm2.yaml
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from harness.targets.converted import convert
from harness.targets.registry import load_target
from harness.training.convert import ConvertRecipe, sequences
from harness.training.masked_blocks import layout
from tasks.registry import train_answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="zoo/recipes/sdar-smollm2.yaml")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = ConvertRecipe.load(args.recipe)
    base = load_target(recipe.base)
    held = recipe.validation_examples // len(recipe.tasks)
    pairs = [p for name in recipe.tasks for p in train_answers([name], base.tokenizer, recipe.samples_per_task)[:held]]
    data = sequences(pairs, recipe, base.eos_id)
    target = convert(base, recipe.mask_id, recipe.rank, recipe.alpha)
    size = recipe.block_length
    losses: dict[str, list[list[float]]] = {
        "shifted": [[] for _ in range(size)],
        "unshifted": [[] for _ in range(size)],
    }
    generator = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        for start in range(0, len(data), recipe.batch_size):
            chunk = data[start : start + recipe.batch_size]
            batch = layout(chunk, size, recipe.mask_id, generator)
            clean_logits, kv = target.model(batch.clean_ids, torch.arange(batch.clean_ids.shape[1]), batch.clean_attend)
            noisy, _ = target.model(
                batch.noisy_ids,
                batch.noisy_positions,
                batch.noisy_attend,
                kv,
                torch.ones_like(batch.noisy_ids, dtype=torch.bool),
            )
            for row, seq in enumerate(chunk):
                origin = seq.prompt_length - seq.prompt_length % size
                tokens = torch.tensor(seq.tokens)
                for index in range(len(seq.tokens) - origin):
                    position = origin + index
                    if position < seq.prompt_length or batch.noisy_ids[row, index] != recipe.mask_id:
                        continue
                    offset = position % size
                    shifted = clean_logits[row, position - 1] if offset == 0 else noisy[row, index - 1]
                    losses["shifted"][offset].append(float(F.cross_entropy(shifted[None], tokens[position, None])))
                    unshifted = F.cross_entropy(noisy[row, index][None], tokens[position, None])
                    losses["unshifted"][offset].append(float(unshifted))
    print(f"step-0 cross-entropy of masked answer tokens, {len(data)} held-out sequences of {', '.join(recipe.tasks)}")
    print(f"{'convention':<10} {'all':>7} " + " ".join(f"{'pos ' + str(i):>7}" for i in range(size)))
    for name, by_offset in losses.items():
        flat = [x for values in by_offset for x in values]
        cells = " ".join(f"{sum(v) / max(1, len(v)):7.3f}" for v in by_offset)
        print(f"{name:<10} {sum(flat) / len(flat):7.3f} {cells}")


if __name__ == "__main__":
    main()

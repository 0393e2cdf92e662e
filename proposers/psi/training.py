"""Uno's diffusion distillation of a gated-LoRA drafter (`spotbench train-drafter RECIPE --out DIR`).

Each training sequence is a clean prompt + response and a noisy copy of the response, evaluated in
two passes: the clean rows, causal (gate off: the frozen base model, bitwise), outside autograd since
they depend on no trainable weight; then the noisy rows over the clean pass's keys/values. The noisy
copy is cut into blocks of k positions (a random offset per sequence, so every alignment is seen) and
a noisy row at position q, in the block starting at a, sees the clean rows before a and the noisy rows
of its own block (gate on), which is the draft forward's layout at inference
(`proposers.psi.proposer.draft_block`: the pending row is clean position a - 1). Noisy tokens are
uniform over the vocabulary. The noisy row at q learns the distribution of the token at q + 1 from
the teacher, the clean row at q: total variation sum_v |p_student - p_teacher| per response
position. The block size follows the curriculum (e.g. 2 -> 4 -> 8, equal shares of the steps).

Train splits only (the command reads them: prompts as the task builds them for the base, through its
chat template when it has one; responses are the reference answers); the first `validation_prompts` prompts are held out
and decoded with linear Psi-Spec at some checkpoints, T=0, so the learning curve is the mean tokens
per verify forward (tau). Deterministic by seed; the run state is saved every `checkpoint_every`
steps in the output folder, so re-running the command resumes (bit-identically), and removed when
the drafter is written: the folder then holds only the LoRA weights and `drafter.json`.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor
from tqdm import tqdm

from harness.decoding.autoregressive import ARConfig, ar_decode
from harness.errors import UserError
from harness.recipes import load_recipe
from harness.targets.ar import ARTarget
from harness.training.loop import TrainingRun, precision, remove_state
from harness.validation import Count, Counts, NonNegative, NonNegativeInt, Positive, Text, Texts
from proposers.psi.lora import META_FILE, GatedLoRAModel, save_drafter, weights_hash
from proposers.psi.proposer import PsiLinear

STATE_FILE = "train_state.pt"


@dataclass(frozen=True)
class DrafterRecipe:
    """Field types are the recipe's schema (harness/validation.py)."""

    name: Text
    base: Text
    """The target whose weights the drafter is distilled from (a name `load_target` knows)."""
    tasks: Texts
    seed: NonNegativeInt = 0
    rank: Count = 8
    alpha: Positive = 16.0
    curriculum: Counts = (2, 4, 8)
    """Noisy block sizes, each for an equal share of the steps; the last bounds B - 1 at inference."""
    steps: Count = 300
    batch_size: Count = 8
    learning_rate: Positive = 1e-3
    warmup_steps: NonNegativeInt = 20
    weight_decay: NonNegative = 0.0
    grad_clip: Positive = 1.0
    prompt_max_tokens: Count = 256
    response_max_tokens: Count = 64
    """Longer responses are cut (the first tokens of an answer are where drafting starts)."""
    train_examples: NonNegativeInt = 0
    """At most this many training sequences (0: the whole train splits); the command then reads only
    the first `validation_prompts + train_examples` samples of each task."""
    checkpoint_every: Count = 25
    validation_prompts: NonNegativeInt = 8
    validation_every: Count = 100
    validation_width: Count = 8
    validation_gen_length: Count = 64
    dtype: Literal["float32", "bfloat16"] = "float32"
    """`bfloat16`: the frozen base in bfloat16 and every forward of the run, validation included,
    under autocast (the LoRA weights and their optimizer stay float32)."""

    @property
    def samples_per_task(self) -> int | None:
        """The train-split samples of each task the drafter reads (`tasks.registry.train_answers`):
        the held-out prompts and `train_examples` (None: all)."""
        return self.validation_prompts + self.train_examples if self.train_examples else None

    @staticmethod
    def load(path: str | Path, steps: int | None = None) -> DrafterRecipe:
        return load_recipe(DrafterRecipe, path, {"steps": steps})


@dataclass(frozen=True)
class Sequence:
    prompt: list[int]
    response: list[int]


def training_data(
    recipe: DrafterRecipe, pairs: list[tuple[list[int], list[int]]], eos_id: int
) -> tuple[list[Sequence], list[list[int]]]:
    """(training sequences, held-out validation prompts) from (prompt ids, response ids) pairs of
    train splits, in the tasks' order: the first `validation_prompts` are held out, the rest are cut,
    filtered and shuffled by the recipe's seed."""
    sequences = [
        Sequence(prompt, response[: recipe.response_max_tokens - 1] + [eos_id])
        for prompt, response in pairs
        if len(prompt) <= recipe.prompt_max_tokens
    ]
    validation = [s.prompt for s in sequences[: recipe.validation_prompts]]
    training = sequences[recipe.validation_prompts :]
    random.Random(recipe.seed).shuffle(training)
    if recipe.train_examples:
        training = training[: recipe.train_examples]
    if len(training) < recipe.batch_size:
        raise UserError(
            f"recipe {recipe.name}: only {len(training)} training sequences for batch size {recipe.batch_size}"
        )
    return training, validation


@dataclass
class Layout:
    """One batch as two passes: the clean sequences (causal, the frozen base; outside autograd) and
    the noisy rows, which read the clean pass's keys/values through the block mask."""

    clean_ids: Tensor  # [N, C] prompt + response, right-padded
    clean_positions: Tensor  # [N, C]
    noisy_ids: Tensor  # [N, M] uniform noise, right-padded
    noisy_positions: Tensor  # [N, M]
    noisy_allowed: Tensor  # [N, M, C + M] bool: clean rows before the block, noisy rows of the block
    teacher: Tensor  # [K, 2] (sequence, clean row) of the clean rows teaching
    student: Tensor  # [K, 2] ... and of the noisy rows learning, pairwise


def layout(batch: list[Sequence], block: int, vocab_size: int, pad_id: int, generator: torch.Generator) -> Layout:
    """The clean and noisy rows of each sequence, right-padded, with the block mask (module docstring)."""
    parts = []
    for seq in batch:
        clean = seq.prompt + seq.response
        start, length = len(seq.prompt), len(clean)
        count = length - 1 - start  # noisy rows stand for positions start .. length - 2
        offset = int(torch.randint(block, (1,), generator=generator))
        q = torch.arange(start, start + count)
        block_start = (start + (q - start + offset) // block * block - offset).clamp(min=start)
        noise = torch.randint(vocab_size, (count,), generator=generator)
        parts.append((clean, q, block_start, noise))
    n, width = len(batch), max(len(clean) for clean, _, _, _ in parts)
    rows = max(q.numel() for _, q, _, _ in parts)
    clean_ids = torch.full((n, width), pad_id, dtype=torch.long)
    noisy_ids = torch.full((n, rows), pad_id, dtype=torch.long)
    noisy_positions = torch.zeros(n, rows, dtype=torch.long)
    noisy_allowed = torch.zeros(n, rows, width + rows, dtype=torch.bool)
    noisy_allowed[:, :, width:] = torch.eye(rows, dtype=torch.bool)  # a padding row sees itself only
    teacher, student = [], []
    for row, (clean, q, block_start, noise) in enumerate(parts):
        count = q.numel()
        clean_ids[row, : len(clean)] = torch.tensor(clean)
        noisy_ids[row, :count] = noise
        noisy_positions[row, :count] = q
        noisy_allowed[row, :count, :width] = torch.arange(width)[None, :] < block_start[:, None]
        noisy_allowed[row, :count, width : width + count] = block_start[:, None] == block_start[None, :]
        teacher += [(row, int(p)) for p in q]
        student += [(row, j) for j in range(count)]
    positions = torch.arange(width).expand(n, width)
    return Layout(
        clean_ids, positions, noisy_ids, noisy_positions, noisy_allowed, torch.tensor(teacher), torch.tensor(student)
    )


def tv_loss(drafter: GatedLoRAModel, batch: Layout) -> Tensor:
    """Mean over response positions of sum_v |p_student - p_teacher| (module docstring). The clean
    pass is the frozen base (gate off), so it runs outside autograd and only the noisy rows, over
    its cached keys/values, are differentiated."""
    from transformers import DynamicCache

    head = drafter.model.get_output_embeddings()
    cache = DynamicCache()
    with torch.no_grad():
        clean = drafter.hidden(
            None, input_ids=batch.clean_ids, position_ids=batch.clean_positions, cache=cache, use_cache=True
        )
        teacher = probabilities(head(clean[batch.teacher[:, 0], batch.teacher[:, 1]]))
    dtype = head.weight.dtype
    mask = torch.zeros(batch.noisy_allowed.shape, dtype=dtype).masked_fill(~batch.noisy_allowed, torch.finfo(dtype).min)
    noisy = drafter.hidden(
        torch.ones_like(batch.noisy_ids, dtype=torch.bool),
        input_ids=batch.noisy_ids,
        position_ids=batch.noisy_positions,
        attention_mask=mask[:, None],
        cache=cache,
        use_cache=True,
    )
    student = probabilities(head(noisy[batch.student[:, 0], batch.student[:, 1]]))
    return (student - teacher).abs().sum(-1).mean()


def probabilities(logits: Tensor) -> Tensor:
    """Softmax in float32 at least (bfloat16 logits under autocast), float64 kept."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32)).softmax(-1)


def block_size(recipe: DrafterRecipe, step: int) -> int:
    return recipe.curriculum[min(len(recipe.curriculum) - 1, step * len(recipe.curriculum) // recipe.steps)]


def validate(drafter: GatedLoRAModel, target: ARTarget, prompts: list[list[int]], recipe: DrafterRecipe) -> dict:
    """Linear Psi-Spec at width `validation_width`, T=0, on the held-out prompts: tau (tokens per
    verify forward) and tokens per target-network forward (draft forwards counted)."""
    drafter.eval()
    commits = nfe = forwards = 0
    for prompt in prompts:
        generation = ar_decode(
            target,
            prompt,
            PsiLinear(drafter, recipe.validation_width),
            ARConfig(recipe.validation_gen_length),
            recipe.validation_width,
        )
        commits += generation.metrics.commits
        nfe += generation.metrics.nfe
        forwards += generation.metrics.target_forwards
    drafter.train()
    return {"tau": commits / max(1, nfe), "tokens_per_target_forward": commits / max(1, forwards)}


def train_drafter(
    recipe: DrafterRecipe, target: ARTarget, pairs: list[tuple[list[int], list[int]]], out_dir: Path
) -> dict:
    """Train (or resume) into `out_dir` on (prompt ids, response ids) pairs of train splits (the
    caller reads the tasks); returns the drafter's metadata (also written to drafter.json)."""
    if (out_dir / META_FILE).is_file() and not (out_dir / STATE_FILE).exists():
        raise UserError(f"{out_dir} already holds a finished drafter; use a new --out folder")
    training, validation = training_data(recipe, pairs, target.eos_id)
    torch.manual_seed(recipe.seed)
    drafter = GatedLoRAModel(target.model, recipe.rank, recipe.alpha)
    autocast = precision(drafter.model, recipe.dtype, target.device)
    run = TrainingRun(
        recipe, drafter.lora_state().values(), len(training), out_dir / STATE_FILE, "use a new --out folder"
    )
    curve, seconds = [], 0.0
    if run.saved is not None:
        drafter.load_lora(run.saved["lora"])
        curve, seconds = run.saved["curve"], run.saved["seconds"]
    out_dir.mkdir(parents=True, exist_ok=True)
    drafter.train()
    progress = tqdm(total=recipe.steps, initial=run.step, desc=f"train-drafter {recipe.name}", unit="step")
    losses: list[float] = []
    while not run.done:
        began = time.perf_counter()
        chosen = run.batch(training)
        batch = layout(
            chosen, block_size(recipe, run.step), target.vocab_size, target.tokenizer.pad_token_id or 0, run.noise
        )
        with autocast:
            loss = tv_loss(drafter, batch)
        run.optimize(loss)
        step = run.step
        losses.append(loss.item())
        seconds += time.perf_counter() - began
        progress.update(1)
        progress.set_postfix(loss=f"{loss.item():.3f}")
        if step % recipe.validation_every == 0 or step == recipe.steps:
            point = {"step": step, "block": block_size(recipe, step - 1), "train_tv": sum(losses) / len(losses)}
            with autocast:
                curve.append(point | validate(drafter, target, validation, recipe))
            progress.write(str(curve[-1]))
            losses = []
        if run.checkpoint_due():
            run.save({"lora": drafter.lora_state()}, curve=curve, seconds=seconds)
    progress.close()
    meta = {
        "recipe": dataclasses.asdict(recipe),
        "base": recipe.base,
        "base_hash": weights_hash(target.model),
        "rank": recipe.rank,
        "alpha": recipe.alpha,
        "max_block": max(recipe.curriculum),
        "steps": run.step,
        "train_sequences": len(training),
        "train_seconds": round(seconds, 1),
        "curve": curve,
    }
    save_drafter(drafter, out_dir, meta)
    remove_state(out_dir / STATE_FILE)
    return meta

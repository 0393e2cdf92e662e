"""Train a tiny target DLM from a recipe: deterministic by seed, checkpointed, resumable.

A recipe (YAML, see `zoo/recipes/`) fixes everything: family, model size, data, optimisation. The run
folder holds `train_state.pt` (weights, optimiser, RNG states, step) written every
`checkpoint_every` steps, so an interrupted run resumes where it stopped and ends bit-identical to an
uninterrupted one. When training ends, `model/` in the run folder holds the model in its family's
published checkpoint format (plus `training.json`), which `load_target` reads like a real checkpoint.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
from tqdm import tqdm

from harness.errors import UserError
from harness.recipes import Optimizer, load_recipe
from harness.targets.families import family
from harness.targets.model import DLMTransformer, ModelConfig, MoEConfig
from harness.targets.target import DLMTarget
from harness.training.ar_objective import AR_FAMILY, ar_loss, ar_model, save_ar_model
from harness.training.loop import TrainingRun
from harness.training.objective import Example, build_batch, diffusion_loss
from harness.validation import Count, NonNegativeInt, Text, options_check

STATE_FILE = "train_state.pt"
REPORT_FILE = "training.json"
MODEL_DIR = "model"


OPTIMIZER = Optimizer(steps=1000, batch_size=32, warmup_steps=50, weight_decay=0.01, checkpoint_every=100)
"""A zoo target step takes 32 sequences; warmup 50 steps, a checkpoint every 100."""


@dataclass(frozen=True)
class Recipe:
    """Field types are the recipe's schema (harness/validation.py), checked by `load_recipe`."""

    name: Text
    family: Text
    model: Annotated[dict, options_check(ModelConfig, exclude=("vocab_size",))]
    """`ModelConfig` fields except vocab_size (taken from the tokenizer); `moe` as a dict."""
    tasks: list[Text]
    seed: NonNegativeInt = 0
    block_length: Count = 32
    answer_length: Count = 128
    prompt_max_tokens: Count = 160
    optimizer: Optimizer = OPTIMIZER
    """Steps, minibatch, AdamW, schedule, clipping and checkpoints (`harness.recipes.Optimizer`)."""
    validation_examples: NonNegativeInt = 256
    tokenizer: Text = "zoo/tokenizer"

    @staticmethod
    def load(path: str | Path) -> Recipe:
        return load_recipe(Recipe, path)

    def model_config(self, vocab_size: int) -> ModelConfig:
        options = dict(self.model)
        moe = options.pop("moe", None)
        return ModelConfig(vocab_size=vocab_size, moe=MoEConfig(**moe) if moe else None, **options)


def init_weights(model: DLMTransformer, std: float = 0.02) -> None:
    """GPT-style init: small normal weights, zero biases, unit norms (keeps initial logits tame)."""
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, 0.0, std)
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)


def train(recipe: Recipe, examples: list[Example], tokenizer, out_dir: Path) -> dict:
    """Train (or resume) into `out_dir`; returns the training report. `family: ar` trains a causal LM
    on next-token loss of the answers (harness/training/ar_objective.py), with the same loop."""
    ar = recipe.family == AR_FAMILY
    spec = None if ar else family(recipe.family)
    validation, training = examples[: recipe.validation_examples], examples[recipe.validation_examples :]
    if len(training) < recipe.optimizer.batch_size:
        raise UserError(f"recipe {recipe.name}: only {len(training)} training examples")
    torch.manual_seed(recipe.seed)
    model = (
        ar_model(recipe.model, tokenizer, recipe.name) if ar else DLMTransformer(recipe.model_config(len(tokenizer)))
    )
    init_weights(model)
    run = TrainingRun(
        recipe, model.parameters(), len(training), out_dir / STATE_FILE, "use a new --out folder", betas=(0.9, 0.98)
    )
    tokens_seen = 0
    if run.saved is not None:
        model.load_state_dict(run.saved["model"])
        tokens_seen = run.saved["tokens_seen"]
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = dict(mask_id=tokenizer.mask_token_id, pad_id=tokenizer.pad_token_id)
    model.train()
    progress = tqdm(total=recipe.optimizer.steps, initial=run.step, desc=f"train {recipe.name}", unit="step")
    while not run.done:
        chosen = run.batch(training)
        if spec is None:  # family ar
            loss = ar_loss(model, chosen, tokenizer.eos_token_id, tokenizer.pad_token_id)
        else:
            loss = diffusion_loss(
                model, build_batch(chosen, spec, block_length=recipe.block_length, generator=run.noise, **ids)
            )
        run.optimize(loss)
        tokens_seen += sum(len(e.prompt) + len(e.answer) for e in chosen)
        progress.update(1)
        progress.set_postfix(loss=f"{loss.item():.3f}")
        if run.checkpoint_due():
            run.save({"model": model.state_dict()}, tokens_seen=tokens_seen)
    progress.close()
    model.eval()
    report = {
        "name": recipe.name,
        "family": recipe.family,
        "parameters": sum(p.numel() for p in model.parameters()),
        "training_tokens": tokens_seen,
        "steps": run.step,
        "heldout_loss": heldout_loss(model, validation, recipe, spec, ids, tokenizer),
    }
    if spec is not None and spec.attention == "block_causal":
        report["block_length"] = recipe.block_length  # what it decodes at (full attention: any)
    if spec is None:  # family ar
        save_ar_model(model, tokenizer, out_dir / MODEL_DIR, report)
        return report
    target = DLMTarget(
        model, spec, mask_id=ids["mask_id"], eos_id=tokenizer.eos_token_id, tokenizer=tokenizer, name=recipe.name
    )
    save_target(target, out_dir, report)
    return report


@torch.no_grad()
def heldout_loss(model, examples: list[Example], recipe: Recipe, spec, ids: dict, tokenizer) -> float:
    """Diffusion loss (next-token loss for `family: ar`) on held-out training-split examples with
    fixed noise, so runs compare."""
    noise = torch.Generator().manual_seed(12345)
    losses = []
    for start in range(0, len(examples), recipe.optimizer.batch_size):
        chunk = examples[start : start + recipe.optimizer.batch_size]
        if spec is None:
            losses.append(ar_loss(model, chunk, tokenizer.eos_token_id, tokenizer.pad_token_id).item() * len(chunk))
            continue
        batch = build_batch(chunk, spec, block_length=recipe.block_length, generator=noise, **ids)
        losses.append(diffusion_loss(model, batch).item() * len(chunk))
    return sum(losses) / max(1, len(examples))


def save_target(target: DLMTarget, out_dir: Path, report: dict) -> None:
    """Write the final model to `out_dir/model` in its family's format, with the training report."""
    from harness.targets.checkpoint import save_checkpoint

    model_dir = out_dir / MODEL_DIR
    if model_dir.exists():
        shutil.rmtree(model_dir)
    save_checkpoint(target, model_dir, target.family.name)
    (model_dir / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")

"""What every trainer here (zoo targets, conversions, SPOT proposers, Psi-Spec drafters) shares: the
learning-rate schedule, one optimizer step, shuffled batches, and a training state that survives
interruption, so a re-run resumes bit-identically. `TrainingRun` puts them together for the trainers
that draw shuffled batches from a list (train-target, convert, train-drafter).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor

from harness.errors import UserError
from harness.recipes import nested_layout

Item = TypeVar("Item")


def warmup_cosine(peak: float, warmup_steps: int, total_steps: int, step: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


def optimizer_step(
    optimizer: torch.optim.Optimizer, parameters: Iterable[Tensor], loss: Tensor, lr: float, grad_clip: float
) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, grad_clip)
    optimizer.step()


def next_batch(
    items: list[Item], permutation: Tensor, cursor: int, batch_size: int, order: torch.Generator
) -> tuple[list[Item], Tensor, int]:
    """The next `batch_size` items of a shuffled pass over `items`, and the (permutation, cursor) that
    follow it: a pass with fewer than `batch_size` items left is dropped and a new permutation is drawn
    from `order`. Permutation, cursor and `order`'s state are what a saved run resumes from."""
    if cursor + batch_size > len(permutation):
        permutation, cursor = torch.randperm(len(items), generator=order), 0
    return [items[i] for i in permutation[cursor : cursor + batch_size].tolist()], permutation, cursor + batch_size


def precision(model: torch.nn.Module, dtype: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Put a model's frozen weights in `dtype` (an adapter's `lora_` weights, and so its optimizer,
    stay float32) and return the autocast context every forward of the run runs under: bfloat16
    steps are several times faster on CPUs with AVX512-BF16."""
    if dtype == "float32":
        return contextlib.nullcontext()
    if dtype != "bfloat16":
        raise UserError(f"dtype {dtype!r}: training runs in float32 or bfloat16")
    for name, parameter in model.named_parameters():
        if "lora_" not in name:
            parameter.data = parameter.data.to(torch.bfloat16)
    return torch.autocast(device.type, dtype=torch.bfloat16)


def same_recipe(saved: dict, recipe: Any) -> bool:
    """Whether a run saved with recipe `saved` (a dict, in today's layout or the flat one recorded
    before the optimizer block: `harness.recipes.nested_layout`) is a run of `recipe`. A field added
    since the run started counts as its default: the run could not have set it; so does a key of the
    optimizer block."""
    saved = nested_layout(saved)
    fields = {f.name: f for f in dataclasses.fields(recipe)}
    if not set(saved) <= set(fields):
        return False
    current = dataclasses.asdict(recipe)
    for name, f in fields.items():
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            default = dataclasses.asdict(default)
            if isinstance(saved.get(name), dict):
                saved = saved | {name: default | saved[name]}
        if name not in saved and (default is dataclasses.MISSING or current[name] != default):
            return False
    return all(saved[name] == current[name] for name in saved)


PART_BYTES = 16 * 2**20
"""A state larger than this is saved in parts of at most this size, so that a run folder a
repository keeps (an unfinished zoo model) holds no file too large to commit."""


def read_state(path: Path) -> dict:
    """The state `save_state` wrote at `path`, joined from its parts when it has them."""
    state = torch.load(path, weights_only=False)
    if "parts" in state:
        parts = [path.parent / name for name in state["parts"]]
        data = b"".join(part.read_bytes() for part in parts if part.is_file())
        if hashlib.sha256(data).hexdigest() != state["sha256"]:
            raise UserError(f"{path}'s parts do not match it (a part is missing or changed); restore them")
        state = torch.load(io.BytesIO(data), weights_only=False)
    return state


def load_state(path: Path, recipe: Any, fix: str) -> dict | None:
    """The training state saved at `path` (None if there is none); one of another recipe is refused."""
    if not path.exists():
        return None
    state = read_state(path)
    if not same_recipe(state["recipe"], recipe):
        raise UserError(f"{path.parent} holds a run of a different recipe; {fix}")
    return state


def save_state(path: Path, state: dict) -> None:
    """Temp file + rename: an interrupted save leaves the previous state, never a broken one. A state
    over `PART_BYTES` goes to content-named parts first; the small file at `path` that lists them is
    replaced last, and only then are the previous state's parts removed."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    if len(data) > PART_BYTES:
        digest = hashlib.sha256(data).hexdigest()
        parts = [f"{path.name}.{digest[:16]}.{i}" for i in range(math.ceil(len(data) / PART_BYTES))]
        for i, name in enumerate(parts):
            _replace(path.parent / name, data[i * PART_BYTES : (i + 1) * PART_BYTES])
        buffer = io.BytesIO()
        torch.save({"parts": parts, "sha256": digest}, buffer)
        data = buffer.getvalue()
    else:
        parts = []
    _replace(path, data)
    for stale in state_files(path):
        if stale.name not in parts and stale != path:
            stale.unlink()


def remove_state(path: Path) -> None:
    """Remove a finished run's state, parts included."""
    for file in state_files(path):
        file.unlink()


def state_files(path: Path) -> list[Path]:
    """The state file at `path` and every part saved beside it."""
    return [p for p in (path, *path.parent.glob(f"{path.name}.*.*")) if p.is_file()]


def _replace(path: Path, data: bytes) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_bytes(data)
    os.replace(temp, path)


class TrainingRun:
    """The scaffolding of a resumable trainer that draws shuffled batches: AdamW over `parameters`
    (the recipe's optimizer block: learning_rate and weight_decay), the noise and order generators (seeded
    `recipe.seed + 1` and `+ 2`), the shuffled pass over `count` items, and the state file at `path`
    that a re-run resumes from (one of another recipe is refused, saying `fix`).

    A state file holds `recipe`, the trainer's weights, `optimizer`, `noise`, `order`, `step`,
    `permutation` and `cursor`, then the trainer's own fields; `saved` is the state this run resumed
    from (None for a fresh one), from which the trainer restores its weights and own fields."""

    def __init__(
        self,
        recipe: Any,
        parameters: Iterable[Tensor],
        count: int,
        path: Path,
        fix: str,
        betas: tuple[float, float] = (0.9, 0.999),
    ) -> None:
        self.recipe, self.path = recipe, path
        self.parameters = list(parameters)
        self.optimizer = torch.optim.AdamW(
            self.parameters, lr=recipe.optimizer.learning_rate, weight_decay=recipe.optimizer.weight_decay, betas=betas
        )
        self.noise = torch.Generator().manual_seed(recipe.seed + 1)
        self.order = torch.Generator().manual_seed(recipe.seed + 2)
        self.step, self.permutation, self.cursor = 0, torch.randperm(count, generator=self.order), 0
        self.saved = load_state(path, recipe, fix)
        if self.saved is not None:
            self.optimizer.load_state_dict(self.saved["optimizer"])
            self.noise.set_state(self.saved["noise"])
            self.order.set_state(self.saved["order"])
            self.step, self.permutation, self.cursor = (self.saved[k] for k in ("step", "permutation", "cursor"))

    @property
    def done(self) -> bool:
        return self.step >= self.recipe.optimizer.steps

    def batch(self, items: list[Item]) -> list[Item]:
        """The next `recipe.optimizer.batch_size` items of the shuffled passes (`next_batch`)."""
        chosen, self.permutation, self.cursor = next_batch(
            items, self.permutation, self.cursor, self.recipe.optimizer.batch_size, self.order
        )
        return chosen

    def optimize(self, loss: Tensor) -> None:
        """One optimizer step on `loss` at the schedule's learning rate for this step; counts the step."""
        lr = warmup_cosine(
            self.recipe.optimizer.learning_rate,
            self.recipe.optimizer.warmup_steps,
            self.recipe.optimizer.steps,
            self.step,
        )
        optimizer_step(self.optimizer, self.parameters, loss, lr, self.recipe.optimizer.grad_clip)
        self.step += 1

    def checkpoint_due(self) -> bool:
        """Whether the step just taken is one to save at: every `checkpoint_every` steps and the last."""
        return self.step % self.recipe.optimizer.checkpoint_every == 0 or self.step == self.recipe.optimizer.steps

    def save(self, weights: dict[str, Any], **own: Any) -> None:
        """Save the run's state: the trainer's weights (e.g. `model=...`) and its own fields."""
        save_state(
            self.path,
            {
                "recipe": dataclasses.asdict(self.recipe),
                **weights,
                "optimizer": self.optimizer.state_dict(),
                "noise": self.noise.get_state(),
                "order": self.order.get_state(),
                "step": self.step,
                "permutation": self.permutation,
                "cursor": self.cursor,
                **own,
            },
        )

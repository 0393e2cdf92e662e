"""What every trainer here (zoo targets, SPOT proposers, Psi-Spec drafters) shares: the learning-rate
schedule, one optimizer step, shuffled batches, and a training state that survives interruption, so a
re-run resumes bit-identically.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor

from harness.errors import UserError

Item = TypeVar("Item")


def warmup_cosine(peak: float, warmup_steps: int, total_steps: int, step: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


def optimizer_step(optimizer: torch.optim.Optimizer, parameters: Iterable[Tensor], loss: Tensor, lr: float,
                   grad_clip: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, grad_clip)
    optimizer.step()


def next_batch(items: list[Item], permutation: Tensor, cursor: int, batch_size: int, order: torch.Generator
               ) -> tuple[list[Item], Tensor, int]:
    """The next `batch_size` items of a shuffled pass over `items`, and the (permutation, cursor) that
    follow it: a pass with fewer than `batch_size` items left is dropped and a new permutation is drawn
    from `order`. Permutation, cursor and `order`'s state are what a saved run resumes from."""
    if cursor + batch_size > len(permutation):
        permutation, cursor = torch.randperm(len(items), generator=order), 0
    return [items[i] for i in permutation[cursor : cursor + batch_size].tolist()], permutation, cursor + batch_size


def same_recipe(saved: dict, recipe: Any) -> bool:
    """Whether a run saved with recipe `saved` (a dict) is a run of `recipe`. A field added since the
    run started counts as its default: the run could not have set it."""
    fields = {f.name: f for f in dataclasses.fields(recipe)}
    if not set(saved) <= set(fields):
        return False
    current = dataclasses.asdict(recipe)
    for name, f in fields.items():
        if name not in saved:
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            if default is dataclasses.MISSING or current[name] != default:
                return False
    return all(saved[name] == current[name] for name in saved)


def load_state(path: Path, recipe: Any, fix: str) -> dict | None:
    """The training state saved at `path` (None if there is none); one of another recipe is refused."""
    if not path.exists():
        return None
    state = torch.load(path, weights_only=False)
    if not same_recipe(state["recipe"], recipe):
        raise UserError(f"{path.parent} holds a run of a different recipe; {fix}")
    return state


def save_state(path: Path, state: dict) -> None:
    """Temp file + rename: an interrupted save leaves the previous state, never a broken one."""
    temp = path.with_suffix(".tmp")
    torch.save(state, temp)
    os.replace(temp, path)

"""The training loop of the SPOT family (SPOT and SPOT-Sets): one thread, deterministic by seed,
resumable.

Each step draws `batch_size` examples with probability `depth_decay ** depth` (a generator of its own,
seeded `training_seed + 1`), takes the method's loss, and steps AdamW under the warmup-cosine
schedule with gradients clipped at 1. Every `checkpoint_every` steps (and at the last) the run folder
gets `train_state.pt` (the recipe, network, optimizer, example order, step, and what the method keeps
beside them), so an interrupted run resumes bit for bit; a run folder of another recipe is refused.
What the methods do differently is theirs, through `Extras`: SPOT averages weights from a step on
(and holds the learning rate there), SPOT-Sets records a learning curve.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from harness.training.loop import load_state, optimizer_step, save_state, warmup_cosine

STATE_FILE = "train_state.pt"


def nothing(state: dict | None, step: int) -> None:
    return None


@dataclass
class Extras:
    """What a method keeps beside the network across steps and checkpoints."""

    start: Callable[[dict | None, int], None] = nothing
    """Called once before the first step with the resumed state (None on a fresh run) and its step."""
    after_step: Callable[[int], None] = lambda step: None
    """Called after each optimizer step with the number of steps taken."""
    state: Callable[[], dict] = dict
    """Saved with each checkpoint beside the loop's own fields; `start` gets it back on a resume."""
    schedule_step: Callable[[int], int] = lambda step: step
    """The step the learning-rate schedule reads (SPOT holds it from `average_from` on)."""


@dataclass(frozen=True)
class Run:
    """One training run: the network, which of its parameters train, and where its state is kept."""

    net: nn.Module
    parameters: list[nn.Parameter]
    training_seed: int
    state_path: Path
    extras: Extras = field(default_factory=Extras)


def train_steps(recipe: Any, run: Run, depths: Tensor, loss_of: Callable[[Tensor], Tensor]) -> int:
    """Train `run.net` (resuming from `run.state_path`) until `recipe.steps`; returns the steps taken.
    `depths` are the training examples' tree depths (they set the draw); `loss_of(index)` is the
    method's mean loss on the examples at `index`."""
    optimizer = torch.optim.AdamW(run.parameters, lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    order = torch.Generator().manual_seed(run.training_seed + 1)
    state = resumed(run.state_path, recipe, run.net, optimizer, order)
    step = state["step"] if state is not None else 0
    run.extras.start(state, step)
    draw = recipe.depth_decay ** depths.double()
    progress = tqdm(total=recipe.steps, initial=step, desc=f"train {recipe.name}", unit="step")
    run.net.train()
    while step < recipe.steps:
        index = torch.multinomial(draw, recipe.batch_size, replacement=True, generator=order)
        loss = loss_of(index)
        lr = warmup_cosine(recipe.learning_rate, recipe.warmup_steps, recipe.steps, run.extras.schedule_step(step))
        optimizer_step(optimizer, run.parameters, loss, lr, grad_clip=1.0)
        step += 1
        run.extras.after_step(step)
        progress.update(1)
        progress.set_postfix(loss=f"{loss.item():.3f}")
        if step % recipe.checkpoint_every == 0 or step == recipe.steps:
            own = dict(
                recipe=dataclasses.asdict(recipe),
                model=run.net.state_dict(),
                optimizer=optimizer.state_dict(),
                order=order.get_state(),
                step=step,
            )
            save_state(run.state_path, own | run.extras.state())
    progress.close()
    run.net.eval()
    return step


def resumed(
    path: Path, recipe: object, net: nn.Module, optimizer: torch.optim.Optimizer, order: torch.Generator
) -> dict | None:
    """The training state a run folder keeps (None on a fresh run; a run of another recipe is
    refused), with the network, the optimizer and the example order restored from it."""
    state = load_state(path, recipe, "use a new --run-dir")
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
    return state

"""Timing training-step variants side by side (benchmarks/convert_step.py, drafter_step.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.training.loop import precision


def time_variants(
    variants: dict[str, Callable[[Any], torch.Tensor]],
    batches: Sequence[Any],
    model: torch.nn.Module,
    device: torch.device,
    optimizer: torch.optim.Optimizer,
    tokens: int,
) -> None:
    """Print each variant's tokens/s (`tokens`: those of every batch but the first) and its ratio to
    the first variant's: forward, backward and an optimizer step on every batch, the first untimed
    (warm-up). A variant whose name ends in `bf16` runs with the model's frozen weights in bfloat16
    under autocast (`loop.precision`), which converts them for good: list it last."""
    rates = {}
    for name, loss_of in variants.items():
        autocast = precision(model, "bfloat16" if name.endswith("bf16") else "float32", device)
        elapsed, loss = 0.0, torch.zeros(())
        for index, batch in enumerate(batches):
            tick = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with autocast:
                loss = loss_of(batch)
            loss.backward()
            optimizer.step()
            if index:
                elapsed += time.perf_counter() - tick
        steps = len(batches) - 1
        rates[name] = tokens / elapsed
        print(
            f"{name:16s} {rates[name]:8.1f} tokens/s  ({elapsed / steps:.2f} s a step, last loss {loss.item():.4f}, "
            f"torch threads {torch.get_num_threads()})",
            flush=True,
        )
    first = next(iter(rates))
    print(f"ratio to {first}: " + ", ".join(f"{k} {v / rates[first]:.2f}x" for k, v in rates.items()))

"""The learning-rate schedule shared by every trainer (zoo targets, SPOT proposers)."""

from __future__ import annotations

import math


def warmup_cosine(peak: float, warmup_steps: int, total_steps: int, step: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))

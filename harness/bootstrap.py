"""How sure a pass-count speedup is: percentile intervals from resampling the prompts.

A speedup is a ratio of sums over prompts (plain passes / speculative passes), and prompts differ far
more than arms do: on 40 GSM8K prompts a cell moves by a few percent when the prompts change. Every
arm decodes the same prompts, so one resampling of prompt indices serves all arms (paired): a ratio
between two arms is then measured on the same prompts in every draw, and the prompts' shared part
cancels out of it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

DRAWS = 2000
LEVEL = 0.95

Arm = TypeVar("Arm", bound=Hashable)


def resampled_speedups(
    plain_nfe: Sequence[int], spec_nfe: dict[Arm, Sequence[int]], draws: int = DRAWS, seed: int = 0
) -> dict[Arm, Tensor]:
    """[draws] speedup_nfe per arm, every draw summing the same prompts (drawn with replacement) for
    every arm; `plain_nfe[i]` and `spec_nfe[arm][i]` are prompt i's passes."""
    count = len(plain_nfe)
    if count == 0 or any(len(v) != count for v in spec_nfe.values()):
        raise ValueError("every arm needs one pass count per prompt, and there must be prompts")
    index = torch.randint(count, (draws, count), generator=torch.Generator().manual_seed(seed))
    plain = torch.tensor(plain_nfe, dtype=torch.float64)[index].sum(1)
    return {arm: plain / torch.tensor(spec, dtype=torch.float64)[index].sum(1) for arm, spec in spec_nfe.items()}


def versus_best(arm: Tensor, baselines: list[Tensor]) -> Tensor:
    """[draws] an arm's speedup over the best baseline's, the best taken again in every draw."""
    return arm / torch.stack(baselines).max(0).values


def interval(samples: Tensor, level: float = LEVEL) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap samples."""
    tails = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=samples.dtype)
    low, high = torch.quantile(samples, tails).tolist()
    return low, high

"""How sure a figure over prompts is: percentile intervals from resampling the prompts, and which
prompts' wall times a disturbance moved.

A speedup is a ratio of sums over prompts (plain passes / speculative passes, or plain seconds /
speculative seconds), and prompts differ far more than arms do: on 40 GSM8K prompts a cell moves by
a few percent when the prompts change. Every arm decodes the same prompts, so one resampling of
prompt indices serves all arms and all figures (paired): a ratio between two arms is then measured
on the same prompts in every draw, and the prompts' shared part cancels out of it.

Wall time has a failure that pass counts do not: another process that shares the machine for a few
seconds slows the one generation running then by any factor, and a ratio of sums follows the
slowest one (one prompt at 11x its neighbours' time put an 8-prompt arm at 0.59x, its per-prompt
median 1.30x).
`disturbed` finds such values (`DISTURBED_FACTOR`, below), so a figure can leave them out and say
how many it left out.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Hashable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

DRAWS = 2000
LEVEL = 0.95
DISTURBED_FACTOR = 3.0
"""A value more than this many times its arm's median (or less than its 1/factor) is disturbed.
The values judged are normalised so that the prompts of one arm agree (the summary: a row's time per
target forward over its plain reference's, which takes out the prompt's length and the target's
cost; `auto`: seconds per pass or per commit). Undisturbed rows stay within 2x of their arm's median
(at most 1.93x over 20 arms of sdar-a and llada-a, 8-16 prompts each, on a shared 2-core CPU), so 3
leaves half as much again for noise, while a disturbance that moves an 8-prompt ratio of sums by a
fifth or more is 3x or larger (the one above was 11x)."""

Arm = TypeVar("Arm", bound=Hashable)


def resampled_speedups(
    plain: Sequence[float], spec: dict[Arm, Sequence[float]], draws: int = DRAWS, seed: int = 0
) -> dict[Arm, Tensor]:
    """[draws] sum(plain) / sum(spec) per arm, every draw summing the same prompts (drawn with
    replacement) for every arm; `plain[i]` and `spec[arm][i]` are prompt i's passes (or seconds, or
    tokens over seconds for a throughput)."""
    count = len(plain)
    if count == 0 or any(len(v) != count for v in spec.values()):
        raise ValueError("every arm needs one pass count per prompt, and there must be prompts")
    times = _times_drawn(count, draws, seed)
    total = times @ torch.tensor(plain, dtype=torch.float64)
    return {arm: total / (times @ torch.tensor(values, dtype=torch.float64)) for arm, values in spec.items()}


def resampled_quantile(
    values: Sequence[float], prompt: Sequence[int], q: float, draws: int = DRAWS, seed: int = 0
) -> Tensor:
    """[draws] the q-quantile of per-generation `values` (the smallest value with at least a share q
    of the generations at or below it), resampling prompts as `resampled_speedups` does (the same
    draws for the same number of prompts and seed): `prompt[j]` is generation j's prompt index, and a
    drawn prompt brings all its generations."""
    if not values or len(values) != len(prompt):
        raise ValueError("every generation needs its prompt's index, and there must be generations")
    ordered = torch.tensor(values, dtype=torch.float64).sort()
    weight = _times_drawn(max(prompt) + 1, draws, seed).index_select(1, torch.tensor(prompt)[ordered.indices]).cumsum(1)
    return ordered.values[torch.searchsorted(weight, q * weight[:, -1:]).squeeze(1)]


def versus_best(arm: Tensor, baselines: list[Tensor]) -> Tensor:
    """[draws] an arm's speedup over the best baseline's, the best taken again in every draw."""
    return arm / torch.stack(baselines).max(0).values


def interval(samples: Tensor, level: float = LEVEL) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap samples."""
    tails = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=samples.dtype)
    low, high = torch.quantile(samples, tails).tolist()
    return low, high


def disturbed(values: Sequence[float], factor: float = DISTURBED_FACTOR) -> list[bool]:
    """Which values lie more than `factor` times above, or below 1/`factor` of, the median of all of
    them. The median does not follow a disturbed value (as a mean would), so this finds them while
    fewer than half are disturbed; of two values neither is flagged (which one was disturbed cannot
    be told; an interval over them shows the disagreement). Values that are not positive and finite
    (no time measured) are never flagged and count for nothing."""
    valid = [v for v in values if v > 0 and math.isfinite(v)]
    if len(valid) < 3:
        return [False] * len(values)
    middle = statistics.median(valid)
    return [v > 0 and math.isfinite(v) and (v > factor * middle or v * factor < middle) for v in values]


@functools.lru_cache(maxsize=4)
def _times_drawn(count: int, draws: int, seed: int) -> Tensor:
    """[draws, count] how often each of `count` prompts is drawn (with replacement) in each draw: the
    same for the same count and seed, so every figure of a cell is resampled alike (kept for the
    next figure; never written to)."""
    index = torch.randint(count, (draws, count), generator=torch.Generator().manual_seed(seed))
    return torch.zeros(draws, count, dtype=torch.float64).scatter_add_(1, index, torch.ones(draws, count).double())

"""Choosing the draft budget by measured latency, not by passes saved.

A larger tree saves passes but makes each pass evaluate more rows, and what a row costs depends on the
hardware: on a GPU a pass of 16 rows costs about what a pass of one does, on a CPU it costs several
times more. So the budget that saves the most time is a property of (target, device, dtype,
proposer), and it is measured, not assumed:

1. `measure_pass_cost`: the target's pass time as a function of tree rows, on this worker (the median
   of a few timed passes at each row count, over a real prompt's cached prefix).
2. `predict`: for each candidate budget, the passes, rows and proposer time the proposer needs on
   calibration prompts (train split), from `replay` of their recorded plain generations, which is
   exact and costs no target pass; the predicted wall time is passes x cost(rows per pass) plus the
   proposer's time per pass x passes plus the engine's time per commit x commits (measured on the
   plain generations, the same for every arm). The two rates are ratios of sums over the calibration
   prompts that no disturbance moved (`harness.bootstrap.disturbed`, as the summary's
   `speedup_wall_robust`): another process slowing one prompt's proposer or engine for a moment
   must not choose the budget.
3. `choose_budget`: the budget with the smallest predicted time, i.e. the most committed tokens per
   second; its predicted speedup_wall goes into the results beside the measured one.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.bootstrap import disturbed
from harness.decoding import DecodeConfig, Generation, Proposer
from harness.decoding.generation import synchronize
from harness.decoding.replay import replay
from harness.targets.target import DLMTarget

CANDIDATES = tuple(range(1, 17))
"""Budgets `auto` chooses from."""


@dataclass(frozen=True)
class CostCurve:
    rows: tuple[int, ...]
    seconds: tuple[float, ...]
    """Median pass time with that many rows."""

    def at(self, rows: float) -> float:
        """Pass time for `rows` rows, linear between measured points (and beyond the last two)."""
        xs, ys = self.rows, self.seconds
        if len(xs) == 1:
            return ys[0]
        i = max(1, min(len(xs) - 1, next((k for k, x in enumerate(xs) if x >= rows), len(xs) - 1)))
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (rows - x0) / (x1 - x0)


def measure_pass_cost(
    target: DLMTarget,
    prompt_ids: Sequence[int],
    config: DecodeConfig,
    rows: Sequence[int] = (1, 2, 3, 5, 9, 17),
    repeats: int = 5,
) -> CostCurve:
    """The pass time with each number of rows, over the prompt's prefix with the first block masked
    (after untimed passes, the first of which stores the prompt's cache on block-causal targets)."""
    session = target.start(list(prompt_ids), config.gen_length, config.block_length)
    state = session.first_state()[None]
    for count in rows:  # warm-up: allocator and kernels for every shape
        session.forward(state.expand(count, -1))
    times: dict[int, list[float]] = {count: [] for count in rows}
    for _ in range(repeats):  # round-robin, so a burst of load elsewhere hits every row count alike
        for count in rows:
            before = time.perf_counter()
            synchronize(session.forward(state.expand(count, -1)).current)
            times[count].append(time.perf_counter() - before)
    return CostCurve(tuple(rows), tuple(statistics.median(times[count]) for count in rows))


@dataclass(frozen=True)
class Prediction:
    budget: int
    seconds: float
    """Predicted wall time over the calibration prompts."""
    speedup_wall: float
    """Predicted plain time / `seconds`."""
    speedup_nfe: float


def predict(
    plains: Sequence[tuple[Generation, DecodeConfig]],
    make_proposer: Callable[[Generation], Proposer],
    cost: CostCurve,
    budgets: Sequence[int] = CANDIDATES,
) -> list[Prediction]:
    """Each budget's predicted time on the calibration generations (recorded with keep_logits)."""
    engine_per_commit = robust_rate([(p.metrics.other_s, p.metrics.commits) for p, _ in plains])
    commits = sum(p.metrics.commits for p, _ in plains)
    plain_nfe = sum(p.metrics.nfe for p, _ in plains)
    plain_seconds = plain_nfe * cost.at(1) + commits * engine_per_commit
    predictions = []
    for budget in budgets:
        runs = [replay(plain, make_proposer(plain), config, budget) for plain, config in plains]
        nfe = sum(r.metrics.nfe for r in runs)
        rows = sum(r.metrics.rows for r in runs)
        proposer_per_pass = robust_rate([(r.metrics.proposer_s, r.metrics.nfe) for r in runs])
        seconds = nfe * (cost.at(rows / nfe) + proposer_per_pass) + commits * engine_per_commit
        predictions.append(Prediction(budget, seconds, plain_seconds / seconds, plain_nfe / nfe))
    return predictions


def robust_rate(samples: Sequence[tuple[float, int]]) -> float:
    """Seconds per unit over (seconds, units) samples, one per prompt: the ratio of sums over the
    samples whose own rate is not disturbed (more than `DISTURBED_FACTOR` off the samples' median)."""
    flags = disturbed([seconds / units if units else math.nan for seconds, units in samples])
    kept = [sample for sample, off in zip(samples, flags) if not off]
    units = sum(u for _, u in kept)
    return sum(s for s, _ in kept) / units if units else 0.0


def choose_budget(predictions: Sequence[Prediction]) -> Prediction:
    """The fastest budget (the smallest one among equally fast)."""
    return min(predictions, key=lambda p: (p.seconds, p.budget))

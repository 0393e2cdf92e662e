"""Coupled Gumbel noise, keyed by the global commit step (DESIGN.md section 3).

`G(seed, s)` is a pure function of the generation seed and the commit step `s` (the number of
transitions committed so far, across blocks). It is drawn from a counter-based generator (Philox)
whose 128-bit key is `(seed, s)`, so step `s` gets the same noise whichever pass, batch, row or
proposer asks for it, and however many steps were drawn before. It is generated on the CPU in
float64, so it is identical on every device; the rule moves it to the logits' device. The key is
built as a uint64 array: a Python list of ints at or above 2**63 would go through float64 in numpy
and distinct seeds would share one key (2**64-1 and 0, 2**63+1 and 2**63).

Element (i, v) of `G(seed, s)` is draw number `i * vocab + v` of the key's stream, and Philox can
start its stream at any multiple of 4 draws (its counter), so any rows can be drawn alone with the
values the whole block would give them. The verifier reads only the masked positions of each state
it walks (`NoiseSource.rows`): plain decoding draws half the block's noise on average, and the last
steps of a block a row or two.

A speculative pass asks for the same steps several times (the proposer simulates depths, the verifier
walks them), so a `NoiseSource` caches the whole steps it has drawn until the decoding loop moves past
them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from torch import Tensor

_MAX_KEY = 1 << 64
_PHILOX_WORDS = 4
"""Draws per Philox counter value: a stream can start at any multiple of 4 draws."""


class PositionNoise(Protocol):
    """Noise keyed by one number, the absolute position an autoregressive draft decides: a
    `NoiseSource` of one-row steps, or rejection mode's draft stream."""

    def __call__(self, position: int, /) -> Tensor: ...


def gumbel(seed: int, step: int, block_length: int, vocab_size: int) -> Tensor:
    """G(seed, step): standard Gumbel noise [block_length, vocab_size] in float64."""
    return gumbel_rows(seed, step, range(block_length), vocab_size)


def gumbel_rows(seed: int, step: int, positions: range | list[int], vocab_size: int) -> Tensor:
    """Rows `positions` (increasing) of G(seed, step): [len(positions), vocab_size] in float64,
    bit-identical to the same rows of `gumbel`. Each run of consecutive positions is one draw."""
    if not (0 <= seed < _MAX_KEY and 0 <= step < _MAX_KEY):
        raise ValueError(f"seed and step must be in [0, 2**64), got seed={seed}, step={step}")
    philox = np.random.Philox(key=np.array([seed, step], dtype=np.uint64))
    positions = list(positions)
    runs: list[np.ndarray] = []
    start = 0
    for end in range(1, len(positions) + 1):
        if end == len(positions) or positions[end] != positions[end - 1] + 1:
            runs.append(_uniforms(philox, positions[start], end - start, vocab_size))
            start = end
    uniform = runs[0] if len(runs) == 1 else np.concatenate([np.empty(0), *runs])
    # Uniforms in [tiny, 1), then -log(-log u): three times faster than Generator.gumbel, finite.
    uniform = np.maximum(uniform, np.finfo(np.float64).tiny)
    return torch.from_numpy(-np.log(-np.log(uniform))).view(len(positions), vocab_size)


def _uniforms(philox: np.random.Philox, first_row: int, rows: int, vocab_size: int) -> np.ndarray:
    """Draws `first_row * vocab_size` onwards of the key's stream, `rows * vocab_size` of them.
    The generator is moved by setting its state (a new one per run costs as much as a row)."""
    counter, skip = divmod(first_row * vocab_size, _PHILOX_WORDS)
    state = philox.state
    state["state"]["counter"] = np.array([counter, 0, 0, 0], dtype=np.uint64)
    state["buffer_pos"] = _PHILOX_WORDS  # an empty buffer: the next draw starts at the counter
    philox.state = state
    return np.random.Generator(philox).random(skip + rows * vocab_size)[skip:]


class NoiseSource:
    """G(seed, .) for one generation, with a cache of the steps still ahead of the decoding loop."""

    def __init__(self, seed: int, block_length: int, vocab_size: int):
        self.seed = seed
        self.block_length = block_length
        self.vocab_size = vocab_size
        self._cache: dict[int, Tensor] = {}

    def __call__(self, step: int) -> Tensor:
        noise = self._cache.get(step)
        if noise is None:
            noise = self._cache[step] = gumbel(self.seed, step, self.block_length, self.vocab_size)
        return noise

    def rows(self, step: int, positions: Tensor) -> Tensor:
        """[len(positions), V]: the rows of G(seed, step) at `positions` (increasing, on the CPU),
        from the cache when a proposer drew the whole step, else drawn alone and not cached."""
        noise = self._cache.get(step)
        if noise is not None:
            return noise[positions]
        return gumbel_rows(self.seed, step, positions.tolist(), self.vocab_size)

    def forget_before(self, step: int) -> None:
        """Drop cached steps below `step`: the loop has committed them and never asks again."""
        for old in [s for s in self._cache if s < step]:
            del self._cache[old]

"""Coupled Gumbel noise, keyed by the global commit step (DESIGN.md section 3).

`G(seed, s)` is a pure function of the generation seed and the commit step `s` (the number of
transitions committed so far, across blocks). It is drawn from a counter-based generator (Philox)
whose 128-bit key is `(seed, s)`, so step `s` gets the same noise whichever pass, batch, row or
proposer asks for it, and however many steps were drawn before. It is generated on the CPU in
float64, so it is identical on every device; the rule moves it to the logits' device. The key is
built as a uint64 array: a Python list of ints at or above 2**63 would go through float64 in numpy
and distinct seeds would share one key (2**64-1 and 0, 2**63+1 and 2**63).

A speculative pass asks for the same steps several times (the proposer simulates depths, the verifier
walks them), so a `NoiseSource` caches the steps it has drawn until the decoding loop moves past them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

_MAX_KEY = 1 << 64


def gumbel(seed: int, step: int, block_length: int, vocab_size: int) -> Tensor:
    """G(seed, step): standard Gumbel noise [block_length, vocab_size] in float64."""
    if not (0 <= seed < _MAX_KEY and 0 <= step < _MAX_KEY):
        raise ValueError(f"seed and step must be in [0, 2**64), got seed={seed}, step={step}")
    generator = np.random.Generator(np.random.Philox(key=np.array([seed, step], dtype=np.uint64)))
    # Uniforms in [tiny, 1), then -log(-log u): three times faster than Generator.gumbel, finite.
    uniform = np.maximum(generator.random((block_length, vocab_size)), np.finfo(np.float64).tiny)
    return torch.from_numpy(-np.log(-np.log(uniform)))


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

    def forget_before(self, step: int) -> None:
        """Drop cached steps below `step`: the loop has committed them and never asks again."""
        for old in [s for s in self._cache if s < step]:
            del self._cache[old]

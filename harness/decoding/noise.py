"""Coupled Gumbel noise, keyed by the global commit step (DESIGN.md section 3).

`G(seed, s)` is a pure function of the generation seed and the commit step `s` (the number of
transitions committed so far, across blocks). It is drawn from a counter-based generator (Philox
4x64-10, numpy's) whose 128-bit key is `(seed, s)`, so step `s` gets the same noise whichever pass,
batch, row or proposer asks for it, and however many steps were drawn before. The key is built as a
uint64 array: a Python list of ints at or above 2**63 would go through float64 in numpy and distinct
seeds would share one key (2**64-1 and 0, 2**63+1 and 2**63).

Element (i, v) of `G(seed, s)` is draw number `i * vocab + v` of the key's stream, and Philox can
start its stream at any multiple of 4 draws (its counter), so any rows can be drawn alone with the
values the whole block would give them. The verifier reads only the masked positions of each state
it walks (`rows_many`): plain decoding draws half the block's noise on average, and the last
steps of a block a row or two.

Where it is drawn. For a target on the CPU, numpy draws it (the reference, unchanged since the
first runs). For a target on a GPU, the same Philox rounds run as torch integer operations on the
target's device (`device_gumbel`), over every row a round of the batch needs at once: the uniforms
are bit-identical to numpy's (integer arithmetic), and only the float64 `-log(-log u)` is the
device's own, which can differ from numpy's in the last bit (a 1e-15 relative difference, far below
how much the logits of two devices differ). Drawn on the CPU, a real vocabulary's step (V = 150k,
B = 32) costs about 0.1 s on one core and then crosses to the device, per generation and step.

A speculative pass asks for the same steps several times (the proposer simulates depths, the verifier
walks them), so a `NoiseSource` caches the whole steps it has drawn until the decoding loop moves past
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

_MAX_KEY = 1 << 64
_PHILOX_WORDS = 4
"""Draws per Philox counter value: a stream can start at any multiple of 4 draws."""
_TINY = float(np.finfo(np.float64).tiny)


class PositionNoise(Protocol):
    """Noise keyed by one number, the absolute position an autoregressive draft decides: a
    `NoiseSource` of one-row steps, or rejection mode's draft stream."""

    def __call__(self, position: int, /) -> Tensor: ...


def gumbel(seed: int, step: int, block_length: int, vocab_size: int) -> Tensor:
    """G(seed, step): standard Gumbel noise [block_length, vocab_size] in float64, drawn by numpy
    (on a device: `device_gumbel`)."""
    return gumbel_rows(seed, step, range(block_length), vocab_size)


def gumbel_rows(seed: int, step: int, positions: range | list[int], vocab_size: int) -> Tensor:
    """Rows `positions` (increasing) of G(seed, step): [len(positions), vocab_size] in float64,
    bit-identical to the same rows of `gumbel`."""
    positions = list(positions)
    uniform = numpy_uniforms(seed, step, positions, vocab_size)
    # Uniforms in [tiny, 1), then -log(-log u): three times faster than Generator.gumbel, finite.
    uniform = np.maximum(uniform, _TINY)
    return torch.from_numpy(-np.log(-np.log(uniform))).view(len(positions), vocab_size)


def numpy_uniforms(seed: int, step: int, positions: Sequence[int], vocab_size: int) -> np.ndarray:
    """The uniforms under rows `positions` (increasing) of G(seed, step), flat, drawn by numpy: each
    run of consecutive positions is one draw."""
    _check_key(seed, step)
    philox = np.random.Philox(key=np.array([seed, step], dtype=np.uint64))
    runs: list[np.ndarray] = []
    start = 0
    for end in range(1, len(positions) + 1):
        if end == len(positions) or positions[end] != positions[end - 1] + 1:
            runs.append(_uniforms(philox, positions[start], end - start, vocab_size))
            start = end
    return runs[0] if len(runs) == 1 else np.concatenate([np.empty(0), *runs])


def _check_key(seed: int, step: int) -> None:
    if not (0 <= seed < _MAX_KEY and 0 <= step < _MAX_KEY):
        raise ValueError(f"seed and step must be in [0, 2**64), got seed={seed}, step={step}")


def _uniforms(philox: np.random.Philox, first_row: int, rows: int, vocab_size: int) -> np.ndarray:
    """Draws `first_row * vocab_size` onwards of the key's stream, `rows * vocab_size` of them.
    The generator is moved by setting its state (a new one per run costs as much as a row)."""
    counter, skip = divmod(first_row * vocab_size, _PHILOX_WORDS)
    state = philox.state
    state["state"]["counter"] = np.array([counter, 0, 0, 0], dtype=np.uint64)
    state["buffer_pos"] = _PHILOX_WORDS  # an empty buffer: the next draw starts at the counter
    philox.state = state
    return np.random.Generator(philox).random(skip + rows * vocab_size)[skip:]


# Philox 4x64-10 (Salmon et al. 2011, as numpy's Philox): the multipliers of lanes 0 and 2, the
# Weyl increments of the two key words.
_MULTIPLIERS = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
_KEY_INCREMENTS = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
_ROUNDS = 10
_LOW32 = 0xFFFFFFFF
_CHUNK_DRAWS = 1 << 24
"""Draws computed at once on a device: bounds the integer temporaries (a few hundred MB)."""


def device_gumbel(keys: Sequence[tuple[int, int, Sequence[int]]], vocab_size: int, device: torch.device) -> Tensor:
    """The rows `positions` of G(seed, step) for every (seed, step, positions) in `keys`, drawn
    together on `device`: [total rows, vocab_size] float64, the rows in the order given. The
    uniforms are numpy's bit for bit (`device_uniforms`); the logs are the device's."""
    return device_uniforms(keys, vocab_size, device).clamp_min_(_TINY).log_().neg_().log_().neg_()


def device_uniforms(keys: Sequence[tuple[int, int, Sequence[int]]], vocab_size: int, device: torch.device) -> Tensor:
    """`numpy_uniforms` of every (seed, step, positions) in `keys`, as torch integer operations on
    `device`: [total rows, vocab_size] float64, bit for bit."""
    seeds, steps, firsts = [], [], []
    for seed, step, positions in keys:
        _check_key(seed, step)
        seeds += [_signed(seed)] * len(positions)
        steps += [_signed(step)] * len(positions)
        firsts += [p * vocab_size for p in positions]
    out = torch.empty(len(firsts), vocab_size, dtype=torch.float64, device=device)
    key = torch.tensor([seeds, steps], dtype=torch.int64, device=device).view(2, -1)
    first = torch.tensor(firsts, dtype=torch.int64, device=device)
    chunk = max(1, _CHUNK_DRAWS // vocab_size)
    for start in range(0, len(firsts), chunk):
        rows = slice(start, start + chunk)
        out[rows] = _stream_uniforms(key[:, rows], first[rows], vocab_size)
    return out


def _stream_uniforms(key: Tensor, first: Tensor, count: int) -> Tensor:
    """[R, count] float64: draws `first[r]` onwards of key `key[:, r]`'s stream, as numpy's
    `Generator.random` makes them (the top 53 bits of a 64-bit word, times 2**-53)."""
    skip = first % _PHILOX_WORDS
    width = (count + (_PHILOX_WORDS - 1) * 2) // _PHILOX_WORDS if count % _PHILOX_WORDS else count // _PHILOX_WORDS
    # numpy steps its counter before each block of 4 words: draw 4c + i is word i of counter c + 1
    counters = (first // _PHILOX_WORDS + 1)[:, None] + torch.arange(width, device=first.device)
    words = _philox(counters, key)
    if count % _PHILOX_WORDS:  # every row starts on a block of 4 when the vocabulary fills whole blocks
        words = words.gather(1, skip[:, None] + torch.arange(count, device=first.device))
    return ((words >> 11) & ((1 << 53) - 1)).double() * 2.0**-53


def _philox(counters: Tensor, key: Tensor) -> Tensor:
    """[R, 4W]: the 4 words of Philox4x64-10 at counters (counters[r, w], 0, 0, 0) under key[:, r],
    word after word. Lanes 0 and 2 are multiplied, 1 and 3 carried; both pairs are kept stacked so
    that a round is one set of operations."""
    multiplied = torch.stack([counters, torch.zeros_like(counters)])  # lanes 0 and 2
    carried = torch.zeros_like(multiplied)  # lanes 1 and 3
    key = key[:, :, None].clone()
    constants = torch.tensor(
        [
            [_signed(m) for m in _MULTIPLIERS],
            [m >> 32 for m in _MULTIPLIERS],
            [m & _LOW32 for m in _MULTIPLIERS],
            [_signed(w) for w in _KEY_INCREMENTS],
        ],
        device=key.device,
    ).view(4, 2, 1, 1)
    for round_ in range(_ROUNDS):
        if round_:
            key += constants[3]
        high, low = _multiply(multiplied, *constants[:3])
        multiplied, carried = high.flip(0) ^ carried ^ key, low.flip(0)
    return torch.stack([multiplied[0], carried[0], multiplied[1], carried[1]], -1).flatten(1)


def _multiply(lanes: Tensor, m_all: Tensor, m_high: Tensor, m_low: Tensor) -> tuple[Tensor, Tensor]:
    """The high and low 64 bits of the 128-bit products of lanes [2, ...] (unsigned 64-bit words held
    in int64) with the two multipliers (`m_all`, and its high and low 32 bits). int64 products wrap
    modulo 2**64, and every partial sum below stays under 2**64 as an unsigned number, so the bits
    are exact; shifts are masked to be logical."""
    x_high, x_low = (lanes >> 32) & _LOW32, lanes & _LOW32
    low = lanes * m_all
    middle = x_high * m_low + ((x_low * m_low >> 32) & _LOW32)
    cross = (middle & _LOW32) + x_low * m_high
    high = x_high * m_high + ((middle >> 32) & _LOW32) + ((cross >> 32) & _LOW32)
    return high, low


def _signed(word: int) -> int:
    """An unsigned 64-bit word as the int64 with the same bits."""
    return word - _MAX_KEY if word >= 1 << 63 else word


def noise_device(target_device: torch.device) -> torch.device | None:
    """Where a loop on `target_device` draws its noise: None (numpy, on the CPU) for a CPU target,
    the target's own device for any other."""
    return None if target_device.type == "cpu" else target_device


class NoiseSource:
    """G(seed, .) for one generation, with a cache of the steps still ahead of the decoding loop;
    drawn on `device` (None: numpy on the CPU)."""

    def __init__(self, seed: int, block_length: int, vocab_size: int, device: torch.device | None = None):
        self.seed = seed
        self.block_length = block_length
        self.vocab_size = vocab_size
        self.device = device
        self._cache: dict[int, Tensor] = {}

    def __call__(self, step: int) -> Tensor:
        return steps_many([(self, step)])[0]

    def forget_before(self, step: int) -> None:
        """Drop cached steps below `step`: the loop has committed them and never asks again."""
        for old in [s for s in self._cache if s < step]:
            del self._cache[old]


def steps_many(asked: Sequence[tuple[NoiseSource | None, int]]) -> list[Tensor]:
    """`source(step)` for every item (a proposer's whole steps for a round's generations at one
    depth): cached steps from the cache, the others drawn and cached, those of sources on one device
    in a single `device_gumbel` call."""
    pairs = [(_source(source), step) for source, step in asked]
    together: dict[tuple[torch.device, int, int], list[tuple[NoiseSource, int]]] = {}
    for source, step in pairs:
        if step in source._cache:
            continue
        if source.device is None:
            source._cache[step] = gumbel(source.seed, step, source.block_length, source.vocab_size)
        else:
            together.setdefault((source.device, source.vocab_size, source.block_length), []).append((source, step))
    for (device, vocab_size, block_length), members in together.items():
        members = list({(id(source), step): (source, step) for source, step in members}.values())
        keys = [(source.seed, step, range(block_length)) for source, step in members]
        for (source, step), noise in zip(members, device_gumbel(keys, vocab_size, device).split(block_length)):
            source._cache[step] = noise
    return [source._cache[step] for source, step in pairs]


def rows_many(asked: Sequence[tuple[NoiseSource | None, int, Tensor]]) -> list[Tensor]:
    """[len(positions), V] for every (source, step, positions) item (the verifier's rows of a round's
    generations at one depth): the rows of G(seed, step) at `positions` (increasing, on the CPU), from
    the cache when a proposer drew the whole step, else drawn alone and not cached; those of sources
    on one device in a single `device_gumbel` call."""
    triples = [(_source(source), step, positions) for source, step, positions in asked]
    out: list[Tensor | None] = [None] * len(asked)
    together: dict[tuple[torch.device, int], list[int]] = {}
    for i, (source, step, positions) in enumerate(triples):
        cached = source._cache.get(step)
        if cached is not None:
            out[i] = cached[positions]
        elif source.device is None:
            out[i] = gumbel_rows(source.seed, step, positions.tolist(), source.vocab_size)
        else:
            together.setdefault((source.device, source.vocab_size), []).append(i)
    for (device, vocab_size), members in together.items():
        keys = [(triples[i][0].seed, triples[i][1], triples[i][2].tolist()) for i in members]
        drawn = device_gumbel(keys, vocab_size, device).split([len(k[2]) for k in keys])
        for i, rows in zip(members, drawn):
            out[i] = rows
    return out  # type: ignore[return-value]


def _source(source: NoiseSource | None) -> NoiseSource:
    """A loop at T > 0 always has a source."""
    if source is None:
        raise ValueError("sampling at T>0 needs Gumbel noise")
    return source

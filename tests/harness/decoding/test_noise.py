"""G(seed, s): a pure function of (seed, step), whatever asks for it and in whatever order."""

from typing import cast

import numpy as np
import pytest
import torch

from harness.decoding import (
    DecodeConfig,
    NoiseSource,
    decode_batch,
    gumbel,
    noise,
    parse_rule,
    plain_generation,
    speculative,
    speculative_generation,
    steps_many,
)
from harness.decoding.noise import device_gumbel, device_uniforms, gumbel_rows, numpy_uniforms, rows_many
from harness.decoding.tree import Proposer
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.registry import load_dlm_target
from proposers import build_proposer
from proposers.spot import search


def test_deterministic_shape_and_dtype():
    a, b = gumbel(7, 3, 8, 259), gumbel(7, 3, 8, 259)
    assert a.shape == (8, 259) and a.dtype == torch.float64
    assert torch.equal(a, b)
    assert torch.isfinite(a).all()


def test_different_steps_and_seeds_differ():
    base = gumbel(0, 0, 8, 259)
    assert not torch.equal(base, gumbel(0, 1, 8, 259))
    assert not torch.equal(base, gumbel(1, 0, 8, 259))
    # (seed, step) is the key: swapping them is a different stream, not the same one
    assert not torch.equal(gumbel(1, 2, 8, 259), gumbel(2, 1, 8, 259))


def test_independent_of_call_order_cache_and_batch():
    """A source that drew other steps first (a deeper tree, another batch shape) gives the same noise."""
    shallow, deep = NoiseSource(5, 8, 259), NoiseSource(5, 8, 259)
    for step in range(12):
        deep(step)
    deep.forget_before(6)
    for step in (9, 3, 0, 11):
        assert torch.equal(shallow(step), deep(step))
        assert torch.equal(shallow(step), gumbel(5, step, 8, 259))


def test_forget_before_drops_only_older_steps():
    source = NoiseSource(0, 4, 16)
    kept = source(5)
    source(2)
    source.forget_before(3)
    assert source(5) is kept
    assert set(source._cache) == {5}


def test_is_standard_gumbel():
    sample = torch.cat([gumbel(0, s, 16, 259).flatten() for s in range(20)])
    assert abs(sample.mean().item() - 0.5772) < 0.02  # Euler-Mascheroni
    assert abs(sample.var().item() - torch.pi**2 / 6) < 0.05


BOUNDARY = [0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1]


def test_distinct_keys_are_distinct_samples_over_the_whole_range(recwarn):
    """Seeds and steps at or above 2**63 once went through float64 (2**64-1 drew seed 0's noise)."""
    by_seed = {seed: gumbel(seed, 0, 2, 8) for seed in BOUNDARY}
    by_step = {step: gumbel(0, step, 2, 8) for step in BOUNDARY}
    for draws in (by_seed, by_step):
        keys = list(draws)
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                assert not torch.equal(draws[a], draws[b]), (a, b)
    assert not torch.equal(gumbel(2**64 - 1, 2**63, 2, 8), gumbel(2**63, 2**64 - 1, 2, 8))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# gumbel(seed, step, 2, 3) as drawn before the key became a uint64 array (float.hex, row-major)
PINNED = {
    (0, 0): [
        "-0x1.7ed5eab479370p+0",
        "-0x1.67907d1f18d9cp-2",
        "-0x1.92625fbf453bep-1",
        "0x1.1e0ab5d2468edp-1",
        "0x1.7e58f99b78e3cp-2",
        "-0x1.fc0de49349318p-3",
    ],
    (7, 3): [
        "0x1.42e731b439705p-2",
        "0x1.217bc2a928fefp+0",
        "-0x1.18726582f9905p+0",
        "-0x1.2119c037066a5p-3",
        "0x1.e94ae28f80395p-1",
        "-0x1.f644b2c8c5c0ap-2",
    ],
    (2**63 - 1, 5): [
        "0x1.778d25022bb34p+0",
        "0x1.137e1f68f61abp+0",
        "0x1.788fd621de3bcp+0",
        "-0x1.5c517bcc8c336p-4",
        "0x1.fa77a61540d21p+0",
        "-0x1.8a3e3a39c6f09p-2",
    ],
    (0, 2**63 - 1): [
        "0x1.b1962b4d7dbfdp-3",
        "-0x1.3c4791d76c8d3p-2",
        "0x1.0010164ea173dp+0",
        "0x1.bee1b12c5afcfp-5",
        "0x1.904e971094d9cp+0",
        "0x1.8c4dc80876c3dp-1",
    ],
}


def test_noise_below_2_63_is_bit_identical_to_before():
    for (seed, step), values in PINNED.items():
        assert [float(x).hex() for x in gumbel(seed, step, 2, 3).flatten()] == values


def test_rows_drawn_alone_are_the_rows_of_the_whole_step():
    """The verifier draws only masked rows: each must be bit-identical to the whole block's row, for
    vocabularies that do and do not fill whole Philox blocks (4 draws), runs and gaps alike."""
    generator = torch.Generator().manual_seed(0)
    for vocab in (2048, 259, 3):
        full = gumbel(9, 4, 16, vocab)
        for _ in range(20):
            keep = torch.rand(16, generator=generator) < 0.5
            keep[torch.randint(16, (1,), generator=generator)] = True
            positions = keep.nonzero().squeeze(1)
            assert torch.equal(gumbel_rows(9, 4, positions.tolist(), vocab), full[positions])
    assert gumbel_rows(9, 4, [], 259).shape == (0, 259)


def test_source_rows_come_from_the_cache_or_are_drawn_alone():
    fresh, warm = NoiseSource(3, 8, 259), NoiseSource(3, 8, 259)
    warm(2)
    positions = torch.tensor([1, 2, 6])
    assert torch.equal(rows_many([(fresh, 2, positions)])[0], rows_many([(warm, 2, positions)])[0])
    assert torch.equal(rows_many([(fresh, 2, positions)])[0], gumbel(3, 2, 8, 259)[positions])
    assert 2 not in fresh._cache  # rows drawn alone are the verifier's, read once


CPU = torch.device("cpu")
"""The device path's torch operations run on any device; CI checks them on the CPU."""


@pytest.mark.parametrize("vocab", [2048, 259, 3, 151936])
def test_the_device_stream_is_numpys_bit_for_bit(vocab):
    """The uniforms the device path draws are numpy's (integer arithmetic): every key of the whole
    range, rows that start on and off a block of 4 draws, scattered positions."""
    for seed, step in [(0, 0), (5, 9), (2**63 - 1, 2**63), (2**64 - 1, 2**64 - 1), (2**63, 1)]:
        for positions in ([0], [1, 2, 3], [0, 5, 6, 15]):
            expected = numpy_uniforms(seed, step, positions, vocab)
            drawn = device_uniforms([(seed, step, positions)], vocab, CPU).flatten().numpy()
            assert np.array_equal(drawn, expected), (seed, step, positions)


def test_device_noise_is_numpys_but_for_the_logs_last_bits(monkeypatch):
    """Only the float64 logs are the device's: within a few ulps of numpy's, drawn in chunks or whole."""
    for vocab, positions in [(259, [0, 3, 4, 7]), (151936, [2, 3])]:
        expected = gumbel_rows(11, 2**63 + 4, positions, vocab)
        drawn = device_gumbel([(11, 2**63 + 4, positions)], vocab, CPU)
        assert drawn.dtype == torch.float64 and drawn.shape == expected.shape
        torch.testing.assert_close(drawn, expected, rtol=0, atol=1e-14)
        monkeypatch.setattr(noise, "_CHUNK_DRAWS", vocab)  # one row per chunk
        assert torch.equal(device_gumbel([(11, 2**63 + 4, positions)], vocab, CPU), drawn)
        monkeypatch.undo()
    # the negative control: a neighbouring step is other noise entirely
    assert (device_gumbel([(11, 5, [0])], 259, CPU) - gumbel_rows(11, 6, [0], 259)).abs().max() > 1


def test_a_rounds_draws_together_equal_each_sources_own():
    """`steps_many` and `rows_many` draw the sources of one device in one call: each item gets what
    its own source gives alone, cached steps are reused, and CPU (numpy) sources mix in."""
    sources = [NoiseSource(seed, 8, 259, CPU) for seed in (1, 2, 3)] + [NoiseSource(4, 8, 259)]
    alone = [NoiseSource(s.seed, 8, 259, s.device) for s in sources]
    steps = steps_many([(s, 7 + i) for i, s in enumerate(sources)] + [(sources[0], 7)])
    for i, (drawn, own) in enumerate(zip(steps, alone)):
        assert torch.equal(drawn, own(7 + i))
    assert steps[-1] is steps[0]  # drawn once, then from the cache
    positions = [torch.tensor([0, 2]), torch.tensor([5]), torch.tensor([1, 2, 3, 7]), torch.tensor([6])]
    rows = rows_many([(s, 20, p) for s, p in zip(sources, positions)])
    for drawn, own, p in zip(rows, alone, positions):
        assert torch.equal(drawn, own(20)[p])
    assert torch.equal(rows_many([(sources[1], 8, positions[1])])[0], steps[1][positions[1]])
    with pytest.raises(ValueError, match="needs Gumbel noise"):
        rows_many([(None, 0, positions[0])])


def test_a_loop_on_a_device_draws_its_noise_there(monkeypatch):
    """Decoded with the device path (on the CPU here), every speculative arm still equals plain
    decoding token for token at T=1, the noise was drawn by it, and the round's generations together
    (the verifier's rows, SPOT's depths)."""
    calls, spot_steps = [], []
    draw, steps = noise.device_gumbel, search.steps_many
    monkeypatch.setattr(noise, "device_gumbel", lambda *a: calls.append(len(a[0])) or draw(*a))
    monkeypatch.setattr(search, "steps_many", lambda asked: spot_steps.append(asked) or steps(asked))
    monkeypatch.setattr(speculative, "noise_device", lambda device: device)
    t = load_dlm_target("tiny-random:sdar").exact()
    cfg = DecodeConfig(parse_rule("top1", t.family, t.mask_id), 16, 8, 1.0, 3)
    prompts = [list(b"Q: 2+2=?\nA:"), list(b"hi"), list(b"7*6=")]
    plains = decode_batch(t, [plain_generation(t, p, cfg) for p in prompts], 3)
    assert calls and max(calls) > 1  # the round's generations drawn together
    for arm, budget in [("confidence", 6), ("spot", 8)]:
        loops = [
            speculative_generation(t, p, cast(Proposer, build_proposer(arm, t, plain)), cfg, budget)
            for p, plain in zip(prompts, plains)
        ]
        for plain, generation in zip(plains, decode_batch(t, loops, 3)):
            assert check_lossless(plain, generation, near_tie_tolerance(torch.float64)).exact
            assert generation.metrics.accepted_per_depth[0] > 0, arm
    assert max(len({id(source) for source, _ in asked}) for asked in spot_steps) > 1

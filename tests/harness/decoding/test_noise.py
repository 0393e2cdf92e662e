"""G(seed, s): a pure function of (seed, step), whatever asks for it and in whatever order."""

import torch

from harness.decoding import NoiseSource, gumbel


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

"""Bootstrap intervals: paired over prompts, centred on the full-sample speedup, deterministic."""

from __future__ import annotations

import pytest
import torch

from harness.bootstrap import interval, resampled_speedups, versus_best


def test_interval_holds_the_speedup_and_narrows_with_more_prompts():
    generator = torch.Generator().manual_seed(0)
    widths = []
    for count in (20, 320):
        plain = (60 + torch.randint(0, 20, (count,), generator=generator)).tolist()
        spec = [p // 2 + int(torch.randint(0, 6, (), generator=generator)) for p in plain]
        low, high = interval(resampled_speedups(plain, {"a": spec})["a"])
        assert low < sum(plain) / sum(spec) < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 2


def test_pairing_cancels_what_the_prompts_share():
    """Two arms that save the same share on every prompt: their ratio is 1 in every draw, while each
    arm's own interval is wide because the prompts differ (unpaired draws would not give this)."""
    plain = [10, 100, 40, 70, 25, 90]
    draws = resampled_speedups(plain, {"a": [p // 2 for p in plain], "b": [p // 2 for p in plain]}, seed=3)
    assert torch.equal(draws["a"], draws["b"])
    low, high = interval(draws["a"])
    assert high > low
    assert interval(draws["a"] / draws["b"]) == (1.0, 1.0)


def test_draws_are_deterministic_by_seed():
    plain, spec = [9, 30, 12, 44], {"a": [3, 10, 6, 20]}
    assert torch.equal(resampled_speedups(plain, spec, seed=1)["a"], resampled_speedups(plain, spec, seed=1)["a"])
    assert not torch.equal(resampled_speedups(plain, spec, seed=1)["a"], resampled_speedups(plain, spec, seed=2)["a"])


def test_every_arm_needs_one_count_per_prompt():
    with pytest.raises(ValueError, match="one pass count per prompt"):
        resampled_speedups([1, 2], {"a": [1]})


def test_versus_best_takes_the_best_baseline_in_each_draw():
    arm = torch.tensor([3.0, 3.0])
    assert versus_best(arm, [torch.tensor([1.0, 2.0]), torch.tensor([1.5, 1.0])]).tolist() == [2.0, 1.5]

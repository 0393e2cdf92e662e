"""Bootstrap intervals: paired over prompts, centred on the full-sample speedup, deterministic; the
quantile of resampled generations; which values a disturbance moved."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from harness.bootstrap import disturbed, interval, resampled_quantile, resampled_speedups, versus_best


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


def test_the_quantile_of_resampled_generations_is_the_one_of_the_drawn_multiset():
    """A drawn prompt brings all its generations: each draw's median is the one of the multiset that
    the same draw of `resampled_speedups` sums (read back from it here, 4 / times drawn)."""
    values = [5.0, 1.0, 3.0, 8.0, 2.0, 2.0, 7.0]
    prompt = [0, 0, 1, 2, 2, 3, 3]
    draws = resampled_quantile(values, prompt, 0.5, draws=200, seed=4)
    ones = resampled_speedups([1.0] * 4, {p: [float(i == p) for i in range(4)] for p in range(4)}, 200, 4)
    for d in range(200):
        times = [0 if math.isinf(ones[p][d]) else round(4 / ones[p][d].item()) for p in range(4)]
        drawn = sorted(v for v, p in zip(values, prompt) for _ in range(times[p]))
        assert draws[d].item() == drawn[math.ceil(len(drawn) / 2) - 1]
    assert interval(draws)[0] < interval(draws)[1]
    with pytest.raises(ValueError, match="its prompt's index"):
        resampled_quantile([1.0], [0, 1], 0.5)


def test_a_value_far_off_the_median_is_disturbed():
    assert disturbed([2.3] * 7 + [25.98]) == [False] * 7 + [True]
    assert disturbed([1.0, 1.2, 0.9, 2.9, 1.1]) == [False] * 5  # within the factor of 3
    assert disturbed([1.0, 1.2, 0.9, 3.7, 1.1]) == [False, False, False, True, False]
    assert disturbed([1.0, 1.2, 0.3, 1.1]) == [False, False, True, False]  # below: under a third
    assert disturbed([1.0, 1.1, 10.0]) == [False, False, True]
    assert disturbed([1.0, 10.0]) == [False, False]  # of two, which one was cannot be told
    assert disturbed([1.0, 1.1, 10.0], factor=20) == [False] * 3
    assert disturbed([4.0]) == [False] and disturbed([]) == []
    # no time measured: never flagged, and no part of the median
    assert disturbed([1.0, 0.0, math.nan, 1.1, 9.0]) == [False, False, False, False, True]


def test_disturbed_values_do_not_hide_each_other_while_fewer_than_half():
    values = [1.0, 1.1, 0.9, 1.05, 0.95, 20.0, 30.0]  # two of seven: the median stays ~1
    assert disturbed(values) == [False] * 5 + [True, True]
    # the negative control: a z-score on the mean and standard deviation, which the two disturbed
    # values inflate, misses both
    mean, sd = statistics.mean(values), statistics.stdev(values)
    assert not any(abs(v - mean) / sd > 3 for v in values)

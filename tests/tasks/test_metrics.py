"""The metric modules load through `evaluate.load` by local path and score right and wrong inputs."""

import pytest

from tasks import metrics


def test_gsm8k_match_metric():
    out = metrics.load("gsm8k_match").compute(
        predictions=["3 + 4 = 7\n#### 7", "#### 8", "so it is 7"], references=["7", "7", "7"]
    )
    assert out["strict"] == [True, False, False]
    assert out["flexible"] == [True, False, True]
    assert out["strict_match"] == pytest.approx(1 / 3)


def test_math_equivalence_metric():
    out = metrics.load("math_equivalence").compute(
        predictions=["so \\boxed{0.5}", "\\boxed{3}", "no box"], references=["\\frac12", "4", "1"]
    )
    assert out["correct"] == [True, False, False]
    assert out["extracted"] == ["0.5", "3", None]


def test_code_pass_at_1_metric():
    out = metrics.load("code_pass_at_1").compute(
        predictions=["def f():\n    return 1\n", "def f():\n    return 2\n"],
        references=["assert f() == 1\n"] * 2,
        timeout_s=5,
    )
    assert out["passed"] == [True, False] and out["pass@1"] == 0.5


def test_unknown_metric_is_an_error():
    with pytest.raises(KeyError):
        metrics.load("code_eval")

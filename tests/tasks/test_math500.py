import pytest

from tasks.registry import get_task


@pytest.mark.slow
def test_answer_and_boxed_solution_are_equivalent_through_math_verify():
    result = get_task("math500").self_check()
    assert result.checked == 500 and result.passed >= 495, result.failures


def test_wrong_and_missing_answers_score_wrong():
    task = get_task("math500")
    sample = task.load(limit=1)[0]
    right = f"Hence \\boxed{{{sample.reference}}}."
    scores = task.score([sample] * 3, [right, "Hence \\boxed{12345}.", "I do not know."])
    assert [s["correct"] for s in scores] == [True, False, False]
    assert "\\boxed{}" in task.prompt(sample)

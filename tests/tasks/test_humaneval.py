import pytest

from tasks.registry import get_task


@pytest.mark.slow
def test_canonical_solutions_pass_all_164():
    result = get_task("humaneval").self_check()
    assert (result.checked, result.passed) == (164, 164), result.failures


def test_a_wrong_body_fails_and_stop_strings_cut_the_rest(chat_tokenizer):
    task = get_task("humaneval")
    sample = task.load(limit=1)[0]
    extra = "\n\ndef unrelated():\n    return 0\n"
    scores = task.score([sample] * 2, [sample.target + extra, "    return False\n"])
    assert [s["correct"] for s in scores] == [True, False]
    chat = task.prompt(sample, chat_tokenizer)
    assert chat.endswith("<|assistant|>```python\n" + sample.question)
    assert task.prompt(sample) == sample.question

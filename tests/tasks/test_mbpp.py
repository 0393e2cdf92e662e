import pytest

from tasks.registry import get_task


@pytest.mark.slow
def test_reference_code_passes_its_tests():
    result = get_task("mbpp").self_check()
    assert result.checked == 500 and result.passed >= 495, result.failures


def test_splits_follow_the_published_task_ids():
    task = get_task("mbpp")
    sizes = {split: len(task.load(split)) for split in task.splits}
    assert sizes == {"test": 500, "train": 374, "validation": 90, "prompt": 10}
    assert task.load("test", limit=1)[0].sample_id == "11"


def test_fewshot_prompt_and_a_failing_program(chat_tokenizer):
    task = get_task("mbpp")
    sample = task.load(limit=1)[0]
    prompt = task.prompt(sample)
    assert prompt.count("[BEGIN]") == 4 and prompt.count("[DONE]") == 3 and prompt.endswith("[BEGIN]\n")
    assert task.prompt(sample, chat_tokenizer).endswith("<|assistant|>[BEGIN]\n")
    fenced = f"```python\n{sample.target}\n```\n[DONE] trailing junk"
    scores = task.score([sample] * 3, [sample.target + "\n[DONE]", fenced, "def nothing(): pass"])
    assert [s["correct"] for s in scores] == [True, True, False]

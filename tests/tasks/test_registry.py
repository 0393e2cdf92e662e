import pytest

from harness.errors import UserError
from tasks.base import Task
from tasks.registry import DEFAULT_TASK, get_task, task_names


def test_registry_has_the_five_tasks():
    assert set(task_names()) == {"arith", "gsm8k", "math500", "mbpp", "humaneval"}
    assert DEFAULT_TASK in task_names()


@pytest.mark.parametrize("name", ["arith", "gsm8k", "math500", "mbpp", "humaneval"])
def test_every_task_follows_the_protocol(name, chat_tokenizer):
    task = get_task(name)
    assert isinstance(task, Task) and task.name == name
    assert task.default_split in task.splits and task.stop_strings
    samples = task.load(limit=3)
    assert len(samples) == 3 and len({s.sample_id for s in samples}) == 3
    assert [s.sample_id for s in task.load(limit=3)] == [s.sample_id for s in samples]
    raw, chat = task.prompt(samples[0]), task.prompt(samples[0], chat_tokenizer)
    assert raw and chat.startswith("<|user|>") and "<|assistant|>" in chat
    assert not any(stop in raw[-40:] for stop in task.stop_strings if stop.strip())


def test_unknown_task_is_a_user_error():
    with pytest.raises(UserError, match="known tasks: arith"):
        get_task("nope")


def test_num_fewshot_is_set_where_a_task_takes_examples_and_ignored_elsewhere():
    assert get_task("gsm8k").num_fewshot == 5 and get_task("gsm8k", 0).num_fewshot == 0
    assert get_task("mbpp", 1).num_fewshot == 1
    assert not hasattr(get_task("arith", 3), "num_fewshot")


def test_train_answers_are_the_train_splits_prompts_and_answers_in_task_order():
    from harness.targets.tiny import byte_tokenizer
    from tasks.base import prompt_ids
    from tasks.registry import train_answers

    tokenizer = byte_tokenizer()
    pairs = train_answers(["arith", "gsm8k"], tokenizer, limit=2)
    samples = get_task("arith", 0).load("train", limit=2) + get_task("gsm8k", 0).load("train", limit=2)
    assert len(pairs) == 4
    for (prompt, answer), sample, name in zip(pairs, samples, ["arith"] * 2 + ["gsm8k"] * 2):
        assert prompt == prompt_ids(get_task(name, 0), sample, tokenizer)
        assert tokenizer.decode(answer) == sample.target
    assert len(train_answers(["arith"], tokenizer)) == len(get_task("arith", 0).load("train"))  # None: all

from tasks.registry import get_task


def test_gold_answers_match_themselves_on_the_whole_test_split():
    result = get_task("gsm8k").self_check()
    assert (result.checked, result.passed) == (1319, 1319)


def test_wrong_and_unformatted_answers():
    task = get_task("gsm8k")
    task.num_fewshot = 0
    sample = task.load(limit=1)[0]  # Janet's ducks: 18
    scores = task.score(
        [sample] * 4,
        [" 16 - 3 - 4 = 9\n#### 9", " so she makes 18 dollars.", " #### 18\n\nQuestion: #### 5", " #### 18"],
    )
    assert [s["correct"] for s in scores] == [False, False, True, True]
    assert [s["flexible"] for s in scores] == [False, True, True, True]


def test_fewshot_prompt_has_train_examples_and_ends_at_the_answer():
    task = get_task("gsm8k")
    sample = task.load(limit=1)[0]
    prompt = task.prompt(sample)
    assert prompt.count("Question:") == 6 and prompt.count("####") == 5
    assert prompt.endswith(f"Question: {sample.question}\nAnswer:")
    assert sample.sample_id == "test/0"

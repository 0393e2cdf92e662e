import re

from tasks.arith import SPLIT_SIZES
from tasks.registry import get_task

STEP = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def test_deterministic_and_splits_disjoint():
    task = get_task("arith")
    test, train = task.load("test"), task.load("train")
    assert len(test) == SPLIT_SIZES["test"] and len(train) == SPLIT_SIZES["train"]
    assert not {s.question for s in test} & {s.question for s in train}
    assert len({s.question for s in test}) == len(test)
    assert [s.question for s in get_task("arith").load("test", limit=50)] == [s.question for s in test[:50]]


def test_every_step_is_exact_and_ends_in_the_answer():
    for sample in get_task("arith").load("test"):
        lines = sample.target.strip().split("\n")
        assert lines[-1] == f"#### {sample.reference}"
        steps = [m for line in lines[:-1] for m in STEP.findall(line)]
        assert len(steps) >= 2
        for a, op, b, result in steps:
            assert OPS[op](int(a), int(b)) == int(result), sample.target
        assert int(steps[-1][3]) == int(sample.reference)


def test_questions_are_short_and_varied():
    samples = get_task("arith").load("test")
    assert max(len(s.question.split()) for s in samples) <= 35
    assert len({s.question.split()[1] for s in samples}) > 10


def test_gold_scores_right_and_a_wrong_answer_wrong():
    task = get_task("arith")
    assert task.self_check().passed == 500
    sample = task.load(limit=1)[0]
    wrong = str(int(sample.reference) + 1)
    scores = task.score([sample] * 2, [sample.target, f" #### {wrong}"])
    assert [s["correct"] for s in scores] == [True, False]
    assert task.prompt(sample) == f"Question: {sample.question}\nAnswer:"

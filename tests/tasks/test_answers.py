from tasks.answers import code_block, flexible_number, last_boxed, numbers_equal, strict_number


def test_strict_takes_the_gsm8k_answer_line():
    assert strict_number("so 3 + 4 = 7\n#### 7") == "7"
    assert strict_number("#### 1,234") == "1,234"
    assert strict_number("the answer is 7") is None


def test_flexible_takes_the_last_number():
    assert flexible_number("3 + 4 = 7 apples, so $1,200.") == "$1,200."
    assert flexible_number("-5 degrees") == "-5"
    assert flexible_number("no numbers") is None


def test_numbers_compare_as_decimals():
    assert numbers_equal("$1,200.", "1200")
    assert numbers_equal("7.0", "7")
    assert not numbers_equal("8", "7")
    assert not numbers_equal(None, "7")
    assert not numbers_equal("abc", "7")


def test_last_boxed_balances_braces():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\fbox{x^{2}}") == "x^{2}"
    assert last_boxed("$\\boxed 5$") == "5"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("no box") is None


def test_code_block_unwraps_fences():
    assert code_block("Here:\n```python\ndef f():\n    return 1\n```\nDone") == "def f():\n    return 1\n"
    assert code_block("def f(): pass") == "def f(): pass"

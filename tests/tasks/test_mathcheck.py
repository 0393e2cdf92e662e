import time

from tasks.mathcheck import equivalent_many, normalize


def test_normalize_ignores_spacing_and_frac_variants():
    assert normalize("\\dfrac{1}{2}") == normalize("\\frac {1}{2}")
    assert normalize("90^\\circ") == "90"
    assert normalize("\\text{(B)}") == "(B)"


def test_math_verify_judges_equivalence_and_rejects_wrong_answers():
    pairs = [("\\frac{1}{2}", "0.5"), ("2\\sqrt{2}", "\\sqrt{8}"), ("3", "4"), ("x", None), ("(1,2)", "(2,1)")]
    assert equivalent_many(pairs, workers=1) == [True, True, False, False, False]


def test_without_the_fast_path_identical_answers_still_match():
    assert equivalent_many([("\\frac{3}{4}", "\\frac{3}{4}"), ("1", "2")], fast_path=False, workers=1) == [True, False]


def test_a_worker_missing_its_deadline_is_killed_and_scored_wrong():
    start = time.monotonic()
    result = equivalent_many([("\\frac{1}{2}", "0.5")] * 3, timeout_s=0.01, workers=2)
    assert result == [False, False, False]
    assert time.monotonic() - start < 10

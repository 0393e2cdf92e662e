"""`spotbench tasks list|check` through the real CLI entry point."""

import json

from spotbench.cli import main
from tasks import data
from tasks.arith import Arith


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.strip().splitlines()]


def test_list_shows_every_task_and_its_data(capsys):
    assert main(["tasks", "list", "--json"]) == 0
    rows = {row["task"]: row for row in json_lines(capsys.readouterr().out)}
    assert set(rows) == {"arith", "gsm8k", "math500", "mbpp", "humaneval"}
    assert rows["arith"]["data"] == "built-in"
    assert rows["humaneval"]["data"].startswith("local ")


def test_check_reports_each_task_as_json(capsys):
    assert main(["tasks", "check", "arith", "gsm8k", "humaneval", "--limit", "20", "--json"]) == 0
    rows = json_lines(capsys.readouterr().out)
    assert [r["task"] for r in rows] == ["arith", "gsm8k", "humaneval"]
    assert all(r["checked"] == r["passed"] == 20 and r["failures"] == [] for r in rows)


def test_check_fails_when_a_scorer_rejects_gold_answers(capsys, monkeypatch):
    monkeypatch.setattr(
        Arith, "score", lambda self, samples, completions: [{"correct": i % 2 == 0} for i in range(len(samples))]
    )
    assert main(["tasks", "check", "arith", "--limit", "10"]) == 1
    out = capsys.readouterr().out
    assert "5/10 passed  FAIL" in out and "test/1 test/3" in out


def test_check_fails_when_every_checked_sample_fails(capsys, monkeypatch):
    """A task's allowed failures are a share of what was checked: none of a few (MBPP allows 1%)."""
    from tasks.mbpp import MBPP

    monkeypatch.setattr(MBPP, "score", lambda self, samples, completions: [{"correct": False} for _ in samples])
    assert main(["tasks", "check", "mbpp", "--limit", "3"]) == 1
    assert "0/3 passed  FAIL" in capsys.readouterr().out


def test_missing_data_exits_2_with_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data.hub_reachable.cache_clear()
    try:
        assert main(["tasks", "check", "humaneval", "--data-dir", str(tmp_path)]) == 2
        assert main(["tasks", "list", "--data-dir", str(tmp_path)]) == 0
    finally:
        data.hub_reachable.cache_clear()
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert error.startswith("spotbench: error: task humaneval") and "\n" not in error
    assert "humaneval  test" in captured.out and "missing" in captured.out

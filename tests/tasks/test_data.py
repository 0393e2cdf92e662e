import gzip
import json
from pathlib import Path

import pytest

import tasks
from harness.errors import UserError
from tasks import data
from tasks.registry import get_task


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    default, how = data.data_dir()
    assert how == "default"
    assert default == Path(tasks.__file__).resolve().parents[1].parent / "shared" / "data"
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path / "env"))
    assert data.data_dir() == (tmp_path / "env", f"${data.DATA_ENV}")
    assert data.data_dir(tmp_path / "flag") == (tmp_path / "flag", "--data-dir")


def test_offline_means_no_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data.hub_reachable.cache_clear()
    try:
        assert data.hub_offline() and not data.hub_reachable()
    finally:
        data.hub_reachable.cache_clear()


@pytest.mark.parametrize("name", ["gsm8k", "math500", "mbpp", "humaneval"])
def test_missing_data_is_one_clear_user_error(monkeypatch, tmp_path, name):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data.hub_reachable.cache_clear()
    try:
        with pytest.raises(UserError) as error:
            get_task(name).load(data_dir=str(tmp_path))
        assert get_task(name).data_status(str(tmp_path)) == "missing"
    finally:
        data.hub_reachable.cache_clear()
    message = str(error.value)
    assert f"task {name}" in message and str(tmp_path) in message
    assert "--data-dir" in message and data.DATA_ENV in message and "\n" not in message


def test_local_files_load_from_the_given_data_dir(tmp_path):
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(3)]
    (tmp_path / "gsm8k_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task("gsm8k")
    task.num_fewshot = 0
    samples = task.load(data_dir=str(tmp_path))
    assert [s.reference for s in samples] == ["1", "2", "3"]
    assert task.data_status(str(tmp_path)).startswith("local ")


ROWS = [
    {"task_id": 1, "text": "café ✓", "test_list": ["assert f(1) == 2", "x"], "level": 3, "score": 0.5},
    {"task_id": 2, "text": "b", "test_list": [], "level": 4, "score": 1.0},
]
SOURCE = data.Source("rows.jsonl", "hub/rows", fields=("task_id", "text"))


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.jsonl.gz"])
def test_local_rows_are_those_of_the_datasets_json_loader(tmp_path, name):
    import datasets

    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in ROWS)
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    loaded = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "c"))
    assert data.read_rows("t", SOURCE, path) == loaded.to_list() == ROWS


def test_a_row_without_a_field_names_the_line_and_the_field(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"task_id": 3}) + "\n")
    with pytest.raises(UserError, match=r"line 2 has no text \(each row needs task_id, text\)"):
        data.read_rows("t", SOURCE, path)

"""The lm-eval task configs that ship with spotbench (tasks/lm_eval) are package data and find their
data as spotbench's tasks do ($SPOTBENCH_DATA_DIR), from any working directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.lm_eval import TASKS_DIR, with_tasks

QUESTION = "A test question only this data dir has: what is 3 + 4?"


def write_gsm8k(folder: Path) -> None:
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        rows = [{"question": f"{QUESTION} ({split} {i})", "answer": "3 + 4 = 7\n#### 7"} for i in range(3)]
        (folder / f"gsm8k_{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """SPOTBENCH_DATA_DIR set to a data dir of our own, and a working directory that is not the checkout."""
    write_gsm8k(tmp_path / "data")
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("SPOTBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


def load_task(include_path: Path):
    """The task as lm-eval's command line builds it (its TaskManager indexes every lm-eval task)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(include_path)).load(["gsm8k_local"])["tasks"]["gsm8k_local"]


def test_the_loader_reads_the_data_dir_from_another_directory(elsewhere):
    """gsm8k_local.py imported by its path, as lm-eval's `!function` does."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gsm8k_local", TASKS_DIR / "gsm8k_local.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dataset = module.load(version=1.0)
    assert dataset["test"]["question"] == [f"{QUESTION} (test {i})" for i in range(3)]
    assert dataset["train"][0]["answer"] == "3 + 4 = 7\n#### 7"


@pytest.mark.slow  # lm-eval's TaskManager indexes its thousands of task configs first
def test_gsm8k_local_reads_the_data_dir_from_another_directory(elsewhere):
    task = load_task(TASKS_DIR)
    docs = list(task.test_docs())
    assert [d["question"] for d in docs] == [f"{QUESTION} (test {i})" for i in range(3)]
    assert task.doc_to_text(docs[0]) == f"Question: {docs[0]['question']}\nAnswer:"


@pytest.mark.slow
def test_control_a_data_path_relative_to_the_checkout_fails_elsewhere(elsewhere):
    """What the config once did: `data_files` relative to the working directory."""
    import yaml

    folder = elsewhere / "old"
    folder.mkdir()
    config = (
        (TASKS_DIR / "gsm8k_local.yaml")
        .read_text()
        .replace(
            "custom_dataset: !function gsm8k_local.load\n",
            "dataset_kwargs:\n  data_files:\n    train: ../shared/data/gsm8k_train.jsonl\n"
            "    test: ../shared/data/gsm8k_test.jsonl\n",
        )
    )
    assert yaml.safe_load(config.replace("!function ", ""))["dataset_kwargs"]  # the swap happened
    (folder / "gsm8k_local.yaml").write_text(config)
    with pytest.raises(FileNotFoundError, match=r"shared/data/gsm8k_train.jsonl"):
        load_task(folder)


def test_spotbench_lm_eval_includes_its_tasks_unless_given_a_path():
    assert with_tasks(["--tasks", "gsm8k_local"]) == ["--tasks", "gsm8k_local", "--include_path", str(TASKS_DIR)]
    for given in (["--include_path", "mine"], ["--include_path=mine"]):
        assert with_tasks(["--tasks", "x", *given]) == ["--tasks", "x", *given]

"""MBPP: short Python functions checked by three asserts, pass@1 by execution in the sandbox.

Splits by task_id as published: prompt 1-10, test 11-510, validation 511-600, train 601-974. The
prompt is lm-evaluation-harness's 3-shot `mbpp` format (tasks 2, 3 and 4 as examples, code between
`[BEGIN]` and `[DONE]`); the tests are the task's `test_list`, after its `test_setup_code` (which
uses names the solution defines, so it must run after the solution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks import data, metrics
from tasks.answers import code_block
from tasks.base import Sample, SelfCheck, cut, render, self_check

SOURCE = data.Source(
    "mbpp.jsonl",
    "google-research-datasets/mbpp",
    "full",
    "train+test+validation+prompt",
    ("task_id", "text", "code", "test_list", "test_setup_code"),
)
SPLITS = {"test": range(11, 511), "train": range(601, 975), "validation": range(511, 601), "prompt": range(1, 11)}
FEWSHOT_IDS = (2, 3, 4)


def header(row: dict[str, Any]) -> str:
    tests = "\n".join(row["test_list"])
    return (
        f"You are an expert Python programmer, and here is your task: {row['text']} "
        f"Your code should pass these tests:\n\n{tests}\n"
    )


def clean(code: str) -> str:
    return code.replace("\r\n", "\n").strip()


@dataclass
class MBPP:
    name: str = "mbpp"
    splits: tuple[str, ...] = tuple(SPLITS)
    default_split: str = "test"
    stop_strings: tuple[str, ...] = ("[DONE]",)
    num_fewshot: int = 3
    timeout_s: float = 10.0  # CPU seconds per program (the wall clock only backs it up)
    sandboxed = True  # scores by running code: runs check the jail first (registry.check_scorers)

    def load(self, split: str | None = None, limit: int | None = None, data_dir: str | None = None) -> list[Sample]:
        split = split or self.default_split
        rows = {row["task_id"]: row for row in data.load_rows(self.name, SOURCE, data_dir)}
        turns = tuple(
            (header(rows[i]), f"[BEGIN]\n{clean(rows[i]['code'])}\n[DONE]") for i in FEWSHOT_IDS[: self.num_fewshot]
        )
        shots = "".join(f"{question}{answer}\n\n" for question, answer in turns)
        selected = [rows[i] for i in SPLITS[split] if i in rows][:limit]
        return [
            Sample(
                str(row["task_id"]),
                row["text"],
                clean(row["code"]),
                clean(row["test_setup_code"] + "\n" + "\n".join(row["test_list"])),
                {"header": shots + header(row), "question": header(row), "shots": turns},
            )
            for row in selected
        ]

    def prompt(self, sample: Sample, tokenizer: Any = None) -> str:
        text = sample.meta["header"]  # through a chat template the examples are earlier turns
        return render(
            sample.meta["question"], text + "[BEGIN]\n", tokenizer, prefill="[BEGIN]\n", shots=sample.meta["shots"]
        )

    def score(self, samples: list[Sample], completions: list[str]) -> list[dict[str, Any]]:
        programs = [code_block(cut(c, self.stop_strings)) for c in completions]
        return metrics.score_programs(programs, [s.reference for s in samples], self.timeout_s)

    def data_status(self, data_dir: str | None = None) -> str:
        return data.status(SOURCE, data_dir)

    def self_check(self, data_dir: str | None = None, limit: int | None = None) -> SelfCheck:
        return self_check(self, data_dir, limit, allowed_rate=0.01)

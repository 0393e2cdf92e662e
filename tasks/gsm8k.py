"""GSM8K: grade-school math word problems, answered with reasoning and a final `#### n` line.

Prompts follow lm-evaluation-harness's `gsm8k` task ("Question: ...\\nAnswer:", with the first
`num_fewshot` training problems as examples); scoring reports both the strict `#### n` match (the
`correct` field: the format the examples teach) and the flexible last-number match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import UserError
from tasks import data, metrics
from tasks.base import Sample, SelfCheck, cut, render, self_check

FIELDS = ("question", "answer")
SOURCES = {
    "test": data.Source("gsm8k_test.jsonl", "openai/gsm8k", "main", "test", FIELDS),
    "train": data.Source("gsm8k_train.jsonl", "openai/gsm8k", "main", "train", FIELDS),
}
INSTRUCTION = "Solve the problem step by step. End with a line '#### <number>'."


def reference_number(answer: str) -> str:
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def checked_rows(rows: list[dict[str, Any]], source: data.Source) -> list[dict[str, Any]]:
    """Rows whose question and answer are text, the answer with its `#### n` line (UserError if not)."""
    for number, row in enumerate(rows, 1):
        if not (isinstance(row["question"], str) and isinstance(row["answer"], str) and "####" in row["answer"]):
            raise UserError(
                f"task gsm8k: {source.filename} row {number}: question and answer must be text, the "
                f"answer ending in '#### <number>' (got answer {row['answer']!r}); replace it with the "
                f"published file (hub id {source.hub_id})"
            )
    return rows


def format_example(question: str, answer: str | None = None) -> str:
    return f"Question: {question}\nAnswer:" + (f" {answer}\n\n" if answer is not None else "")


def score_numbers(samples: list[Sample], completions: list[str], stop_strings: tuple[str, ...]) -> list[dict[str, Any]]:
    """Strict (`correct`) and flexible number match, shared with the built-in `arith` task."""
    out = metrics.load("gsm8k_match").compute(
        predictions=[cut(c, stop_strings) for c in completions], references=[s.reference for s in samples]
    )
    return [
        {"correct": strict, "strict": strict, "flexible": flexible, "extracted": extracted}
        for strict, flexible, extracted in zip(out["strict"], out["flexible"], out["extracted_strict"])
    ]


@dataclass
class GSM8K:
    name: str = "gsm8k"
    splits: tuple[str, ...] = ("test", "train")
    default_split: str = "test"
    stop_strings: tuple[str, ...] = ("Question:", "\n\n\n")
    num_fewshot: int = 5

    def load(self, split: str | None = None, limit: int | None = None, data_dir: str | None = None) -> list[Sample]:
        split = split or self.default_split
        rows = checked_rows(data.load_rows(self.name, SOURCES[split], data_dir), SOURCES[split])[:limit]
        samples = [
            Sample(f"{split}/{i}", row["question"], " " + row["answer"], reference_number(row["answer"]))
            for i, row in enumerate(rows)
        ]
        if self.num_fewshot and split == "test":
            train_rows = checked_rows(data.load_rows(self.name, SOURCES["train"], data_dir), SOURCES["train"])
            shots = train_rows[: self.num_fewshot]
            context = "".join(format_example(r["question"], r["answer"]) for r in shots)
            turns = tuple((format_example(r["question"]), " " + r["answer"]) for r in shots)
            samples = [
                Sample(s.sample_id, s.question, s.target, s.reference, {"fewshot": context, "shots": turns})
                for s in samples
            ]
        return samples

    def prompt(self, sample: Sample, tokenizer: Any = None) -> str:
        text = sample.meta.get("fewshot", "") + format_example(sample.question)
        shots = sample.meta.get("shots", ())
        if shots:  # through a chat template the examples are earlier turns, the instruction opens the first
            shots = ((f"{INSTRUCTION}\n\n{shots[0][0]}", shots[0][1]), *shots[1:])
            return render(format_example(sample.question), text, tokenizer, shots=shots)
        return render(f"{INSTRUCTION}\n\n{text}", text, tokenizer)

    def score(self, samples: list[Sample], completions: list[str]) -> list[dict[str, Any]]:
        return score_numbers(samples, completions, self.stop_strings)

    def data_status(self, data_dir: str | None = None) -> str:
        return data.status(SOURCES[self.default_split], data_dir)

    def self_check(self, data_dir: str | None = None, limit: int | None = None) -> SelfCheck:
        return self_check(self, data_dir, limit, allowed_rate=0.0)

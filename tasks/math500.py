"""MATH500: competition problems; the answer is the last `\\boxed{}` of the completion.

Zero-shot with the usual "put your final answer within \\boxed{}" instruction. Scoring: the boxed
content equals the gold answer after normalization, or math-verify judges them equivalent (run in
killable worker processes, see `tasks.mathcheck`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks import data, metrics
from tasks.base import Sample, SelfCheck, cut, render, self_check

SOURCE = data.Source(
    "math500_test.jsonl",
    "HuggingFaceH4/MATH-500",
    None,
    "test",
    ("unique_id", "problem", "solution", "answer", "subject", "level"),
)
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass
class MATH500:
    name: str = "math500"
    splits: tuple[str, ...] = ("test",)
    default_split: str = "test"
    stop_strings: tuple[str, ...] = ("\nProblem:",)
    timeout_s: float = 10.0

    def load(self, split: str | None = None, limit: int | None = None, data_dir: str | None = None) -> list[Sample]:
        rows = data.load_rows(self.name, SOURCE, data_dir)[:limit]
        return [
            Sample(
                row["unique_id"],
                row["problem"],
                row["solution"],
                row["answer"],
                {"subject": row["subject"], "level": row["level"]},
            )
            for row in rows
        ]

    def prompt(self, sample: Sample, tokenizer: Any = None) -> str:
        raw = f"Problem:\n{sample.question}\n\n{INSTRUCTION}\n\nSolution:\n"
        return render(f"{sample.question}\n\n{INSTRUCTION}", raw, tokenizer)

    def score(self, samples: list[Sample], completions: list[str], fast_path: bool = True) -> list[dict[str, Any]]:
        out = metrics.load("math_equivalence").compute(
            predictions=[cut(c, self.stop_strings) for c in completions],
            references=[s.reference for s in samples],
            timeout_s=self.timeout_s,
            fast_path=fast_path,
        )
        return [{"correct": ok, "extracted": extracted} for ok, extracted in zip(out["correct"], out["extracted"])]

    def data_status(self, data_dir: str | None = None) -> str:
        return data.status(SOURCE, data_dir)

    def self_check(self, data_dir: str | None = None, limit: int | None = None) -> SelfCheck:
        """Through math-verify for every pair (no string fast path), so the check exercises it."""
        return self_check(self, data_dir, limit, allowed_rate=0.01, fast_path=False)

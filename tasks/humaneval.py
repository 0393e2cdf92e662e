"""HumanEval: complete a Python function from its signature and docstring; pass@1 by execution.

Base models continue the prompt; chat models get the prompt in a code block and the assistant turn
is prefilled with it, so in both cases the completion is the function body and the Codex stop
strings apply. The program is prompt + completion; the tests are the task's `check(entry_point)`,
after the prompt's own helpers (HumanEval/32's `poly`, 38's `encode_cyclic`, 50's
`encode_shift`), so they never call a helper the completion rigged.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from tasks import data, metrics
from tasks.base import Sample, SelfCheck, cut, render, self_check

SOURCE = data.Source(
    "HumanEval.jsonl.gz",
    "openai/openai_humaneval",
    None,
    "test",
    ("task_id", "prompt", "canonical_solution", "test", "entry_point"),
)
INSTRUCTION = "Complete the following Python function. Reply with the completed code only."


def helpers(prompt: str, entry_point: str) -> str:
    """The prompt's code without the function to complete: what the tests may trust."""
    tree = ast.parse(prompt)
    tree.body = [node for node in tree.body if getattr(node, "name", None) != entry_point]
    return ast.unparse(tree)


@dataclass
class HumanEval:
    name: str = "humaneval"
    splits: tuple[str, ...] = ("test",)
    default_split: str = "test"
    stop_strings: tuple[str, ...] = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\n```")
    timeout_s: float = 10.0  # CPU seconds per program (the wall clock only backs it up)
    sandboxed = True  # scores by running code: runs check the jail first (registry.check_scorers)

    def load(self, split: str | None = None, limit: int | None = None, data_dir: str | None = None) -> list[Sample]:
        rows = data.load_rows(self.name, SOURCE, data_dir)[:limit]
        return [
            Sample(
                row["task_id"],
                row["prompt"],
                row["canonical_solution"],
                f"{row['test']}\n\ncheck({row['entry_point']})\n",
                {"entry_point": row["entry_point"]},
            )
            for row in rows
        ]

    def prompt(self, sample: Sample, tokenizer: Any = None) -> str:
        code = sample.question
        user = f"{INSTRUCTION}\n\n```python\n{code}```"
        return render(user, code, tokenizer, prefill=f"```python\n{code}")

    def score(self, samples: list[Sample], completions: list[str]) -> list[dict[str, Any]]:
        programs = [s.question + cut(c, self.stop_strings) for s, c in zip(samples, completions)]
        tests = [helpers(s.question, s.meta["entry_point"]) + "\n" + s.reference for s in samples]
        return metrics.score_programs(programs, tests, self.timeout_s)

    def data_status(self, data_dir: str | None = None) -> str:
        return data.status(SOURCE, data_dir)

    def self_check(self, data_dir: str | None = None, limit: int | None = None) -> SelfCheck:
        return self_check(self, data_dir, limit, allowed_rate=0.0)

"""Prompts given as token ids: `ids:FILE.jsonl` as a task name, one JSON list of ids per line.

For checkpoints without a tokenizer, or prompts tokenized elsewhere: the ids go to the target as they
are (no template, no special tokens added). There is no reference answer, so rows are not scored
(`correct` stays empty); exactness and pass counts are measured as for any task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UserError
from tasks.base import Sample, SelfCheck
from tasks.chat import as_chat

PREFIX = "ids:"


def parse_ids(text: str, where: str) -> list[int]:
    """`1,2,3` (a flag) as token ids: a non-empty list of whole numbers >= 0. An empty item (`1,,2`, a
    trailing comma) is refused: it is a missing id, not a separator to skip."""
    try:
        ids = [int(item) for item in text.split(",")]
    except ValueError:
        raise UserError(f"{where} must be comma-separated token ids like 1,2,3 (no empty item), got {text!r}") from None
    return check_ids(ids, where)


def check_ids(ids: Any, where: str) -> list[int]:
    if (
        not isinstance(ids, list)
        or not ids
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
    ):
        raise UserError(f"{where} must be a non-empty list of token ids (whole numbers >= 0), got {ids!r}")
    return ids


def check_in_vocabulary(ids: list[int], vocab_size: int) -> list[int]:
    """Ids the target can embed: one beyond its vocabulary would index past the embedding table."""
    outside = [i for i in ids if i >= vocab_size]
    if outside:
        raise UserError(
            f"prompt token id {outside[0]} is outside the target's vocabulary (0..{vocab_size - 1}); "
            "give ids below the vocabulary size"
        )
    return ids


def read_ids_file(path: Path) -> list[list[int]]:
    """Every line of a JSONL file as a list of token ids (blank lines skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise UserError(f"cannot read prompt ids file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"prompt ids file {path} is not UTF-8 text") from None
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(
                f"{path}:{number}: not JSON; each line must be a list of token ids like [1, 2, 3]"
            ) from None
        prompts.append(check_ids(value, f"{path}:{number}"))
    if not prompts:
        raise UserError(f"{path}: no prompt; each line must be a list of token ids like [1, 2, 3]")
    return prompts


@dataclass
class PromptIds:
    """The task behind `ids:PATH` (see the module docstring)."""

    path: str
    splits: tuple[str, ...] = ("test",)
    default_split: str = "test"
    stop_strings: tuple[str, ...] = ()
    scored: bool = False

    @property
    def name(self) -> str:
        return PREFIX + self.path

    def load(self, split: str | None = None, limit: int | None = None, data_dir: str | None = None) -> list[Sample]:
        prompts = read_ids_file(Path(self.path))[:limit]
        return [Sample(f"ids/{i}", "", "", "", {"prompt_ids": ids}) for i, ids in enumerate(prompts)]

    def prompt(self, sample: Sample, tokenizer: Any = None) -> str:
        ids, tokenizer = sample.meta["prompt_ids"], as_chat(tokenizer).tokenizer
        return tokenizer.decode(ids) if tokenizer is not None else " ".join(map(str, ids))

    def score(self, samples: list[Sample], completions: list[str]) -> list[dict[str, Any]]:
        return [{"correct": None} for _ in samples]

    def data_status(self, data_dir: str | None = None) -> str:
        return f"local file {self.path}" if Path(self.path).is_file() else f"missing: {self.path}"

    def self_check(self, data_dir: str | None = None, limit: int | None = None) -> SelfCheck:
        return SelfCheck(self.name, 0, 0, [], 0)

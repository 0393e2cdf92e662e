"""What a task is: samples, the `Task` protocol, and the prompt/answer helpers every task shares.

A task is a small object (lm-evaluation-harness / inspect_ai style): it loads a split into
`Sample`s, renders a prompt for a sample (raw text, or through the target tokenizer's chat template
when it has one), names the stop strings the decoder should cut at, and scores completions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.errors import UserError
from tasks.chat import as_chat


@dataclass(frozen=True)
class Sample:
    """One benchmark item.

    `sample_id` is stable across runs and machines (the benchmark's own id where it has one, else
    `<split>/<index>`), because results are keyed by it. `target` is the reference completion (what
    a perfect model would write after the prompt; used for training and for the scorer self-checks);
    `reference` is what scoring compares against (a number, a LaTeX answer, or test code)."""

    sample_id: str
    question: str
    target: str
    reference: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class SelfCheck:
    """Outcome of scoring every reference completion of a split against its own reference."""

    task: str
    checked: int
    passed: int
    failures: list[str]
    allowed_failures: int

    @property
    def ok(self) -> bool:
        return self.checked > 0 and self.checked - self.passed <= self.allowed_failures


@runtime_checkable
class Task(Protocol):
    """The public interface of a task (see the module docstring)."""

    @property
    def name(self) -> str: ...  # read-only: a class attribute or a property (PromptIds)

    splits: tuple[str, ...]
    default_split: str
    stop_strings: tuple[str, ...]

    def load(self, split: str | None = None, limit: int | None = None, data_dir: str | None = None) -> list[Sample]: ...

    def prompt(self, sample: Sample, tokenizer: Any = None) -> str: ...

    def score(self, samples: list[Sample], completions: list[str]) -> list[dict[str, Any]]: ...

    def data_status(self, data_dir: str | None = None) -> str: ...

    def self_check(self, data_dir: str | None = None, limit: int | None = None) -> SelfCheck: ...


def prompt_ids(task: Task, sample: Sample, tokenizer: Any) -> list[int]:
    """The prompt as token ids; no special tokens are added (`render` already applied any template).
    `tokenizer` may be a `tasks.chat.Chat` (template switch, system prompt). A sample given as ids
    (`tasks.prompt_ids`) keeps them as they are."""
    if "prompt_ids" in sample.meta:
        return list(sample.meta["prompt_ids"])
    chat = as_chat(tokenizer)
    if chat.tokenizer is None:
        raise UserError(
            f"task {task.name!r} has text prompts and the target has no tokenizer; "
            "give token-id prompts (task ids:FILE.jsonl) or a checkpoint with tokenizer files"
        )
    return chat.tokenizer.encode(task.prompt(sample, chat), add_special_tokens=False)


def render(
    user_text: str, raw_prompt: str, tokenizer: Any = None, prefill: str = "", shots: tuple[tuple[str, str], ...] = ()
) -> str:
    """`raw_prompt` for base models and with the template switched off; through a chat template
    (`tokenizer`: a tokenizer that has one, or a `tasks.chat.Chat` that applies), `user_text` as the
    user turn after any `shots` (few-shot (question, answer) turns), followed by `prefill`, the start
    of the answer (e.g. the function header the model must continue), so both styles end where the
    completion begins and share the stop strings."""
    chat = as_chat(tokenizer)
    if not chat.applies:
        return raw_prompt
    return chat.render(user_text, shots) + prefill


def cut(text: str, stop_strings: tuple[str, ...]) -> str:
    """The completion up to the first stop string (decoders may overshoot it)."""
    end = min((i for i in (text.find(s) for s in stop_strings) if i >= 0), default=len(text))
    return text[:end]


def self_check(
    task: Task, data_dir: str | None, limit: int | None, allowed_rate: float, **score_options: Any
) -> SelfCheck:
    """Score each sample's reference completion; a scorer that rejects gold answers is broken.
    `allowed_rate` is the fraction of the checked samples that may fail (rounded down, so a check
    of a few samples allows none)."""
    samples = task.load(None, limit=limit, data_dir=data_dir)
    results = task.score(samples, [s.target for s in samples], **score_options)
    failures = [s.sample_id for s, r in zip(samples, results) if not r["correct"]]
    return SelfCheck(task.name, len(samples), len(samples) - len(failures), failures, int(allowed_rate * len(samples)))

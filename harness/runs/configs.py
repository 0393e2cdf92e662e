"""What a run's config may change into: which changes extend a run directory, which refuse, and
which settings make two runs incomparable for the gate.

A run directory only grows. Re-running into it with

- the same config resumes it;
- a config whose list settings (models, proposers, tasks, temperatures, rules, budgets, seeds,
  batch sizes) keep every earlier item, and whose `limit` is at least the earlier one, *extends* it: every
  finished group and arm is reused and only the new ones are decoded (a larger limit takes the next
  prompts of the split, which loads prompts in a fixed order; past the end of every split it takes
  none and changes nothing, `limit_adds_prompts`). The manifest records each extension;
- anything else refuses: a scalar setting that changes what every row means (`split`, `gen_length`,
  `block_length`, `num_fewshot`, `exact`, or any setting this code does not know), a smaller limit, or
  a list that drops an item (its rows would outlive the config that no longer names them).

The gate matches arms by (model, proposer, task, temperature, rule, budget, batch size), so differences in those
lists show up as missing or extra arms; every other setting changes what an arm's numbers are
computed over (other prompts, seeds, lengths, precision) and makes two runs incomparable, as do
different bytes of a checkpoint or data file both runs read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GROWING_NUMBERS = ("limit",)
"""Scalar settings a run extends by increasing (a larger limit adds prompts, keeps the earlier ones)."""
ARM_SETTINGS = ("models", "proposers", "tasks", "temperatures", "rules", "budgets", "batch_sizes")
"""List settings the gate matches arms by: a difference there is a missing or an extra arm."""
_ABSENT = "(unset)"


@dataclass(frozen=True)
class ConfigChange:
    """How a new config relates to the one a run directory holds: setting -> (old, new)."""

    extended: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    refused: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def compare(old: dict[str, Any], new: dict[str, Any]) -> ConfigChange:
    """Sort every differing setting into an extension or a refusal (see the module docstring)."""
    change = ConfigChange()
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if before == after:
            continue
        grows = (isinstance(before, list) and isinstance(after, list) and all(item in after for item in before)) or (
            key in GROWING_NUMBERS and isinstance(before, int) and isinstance(after, int) and after > before
        )
        (change.extended if grows else change.refused)[key] = (before, after)
    return change


def limit_adds_prompts(before: Any, after: Any, tasks: Any, split_sizes: dict[str, int]) -> bool:
    """Whether raising the limit from `before` to `after` gives some task of `tasks` more prompts: not
    when every split already ended within the earlier limit (a task of unknown size: it may)."""
    return not isinstance(tasks, list) or any(
        task not in split_sizes or min(after, split_sizes[task]) > min(before, split_sizes[task]) for task in tasks
    )


def describe(changes: dict[str, tuple[Any, Any]]) -> str:
    """`budgets [2, 4] -> [2, 4, 8], limit 24 -> 10` for one-line messages."""
    return ", ".join(f"{key} {_text(old)} -> {_text(new)}" for key, (old, new) in changes.items())


def result_differences(run: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """Settings and inputs that differ between two runs and change what a matched arm's numbers mean.

    `run` and `baseline` are {"config": ..., "inputs": ...} as a manifest (or a summary's metadata)
    records them. Returns one `name (run value vs baseline value)` item per difference."""
    config, base = run.get("config", {}), baseline.get("config", {})
    out = [
        f"{key} ({_text(config.get(key, _ABSENT))} vs {_text(base.get(key, _ABSENT))})"
        for key in sorted(config.keys() | base.keys())
        if key not in ARM_SETTINGS and config.get(key, _ABSENT) != base.get(key, _ABSENT)
    ]
    return out + input_differences(run.get("inputs", {}), baseline.get("inputs", {}))


def input_differences(now: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """Checkpoints and data files named in both records whose sha256 differs."""
    out = []
    for kind in ("checkpoints", "data"):
        a, b = now.get(kind, {}), recorded.get(kind, {})
        out += [
            f"{kind[:-1]} {name} (sha256 {a[name][:12]} vs {b[name][:12]})"
            for name in sorted(a.keys() & b.keys())
            if a[name] != b[name]
        ]
    return out


def _text(value: Any) -> str:
    return "[" + ", ".join(map(str, value)) + "]" if isinstance(value, list) else str(value)

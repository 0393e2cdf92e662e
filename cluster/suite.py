"""A suite: what a run evaluates (models x tasks x prompts x temperatures x rules x seeds x proposers
x budgets), read from a YAML file and/or command-line flags, and validated before anything starts.

The embedded default (`Suite()`, mirrored by `suites/default.yaml`) is the main job: the zoo target
sdar-a on the offline arith task, the training-free confidence proposer and the best proposer
available (`spot`, the learned proposer trained on sdar-a), greedy and T=1 sampling. Zoo models are trained
zero-shot, so few-shot prompting is off by default.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from harness.errors import UserError

# Settings that do not change any result: not part of a run's config (a run may resume with others).
EXECUTION_FIELDS = ("workers",)


@dataclass(frozen=True)
class Suite:
    models: tuple[str, ...] = ("sdar-a",)
    proposers: tuple[str, ...] = ("confidence", "spot")
    tasks: tuple[str, ...] = ("arith",)
    split: str = "test"
    limit: int = 24
    temperatures: tuple[float, ...] = (0.0, 1.0)
    rules: tuple[str, ...] = ("top1",)
    budgets: tuple[int, ...] = (2, 4, 8)
    seeds: tuple[int, ...] = (0,)
    gen_length: int = 64
    block_length: int = 32
    num_fewshot: int | None = 0
    """Few-shot examples for tasks that have them; None keeps each task's own default."""
    exact: bool = False
    """Exactness mode: float64 targets, rows evaluated one by one (any divergence is then a bug)."""
    workers: int | None = None
    """Ray workers; None = one per GPU, or one per CPU core of the cluster when it has no GPU."""

    def config(self) -> dict[str, Any]:
        """The settings that define the results (JSON-ready; stored in the run's manifest)."""
        data = dataclasses.asdict(self)
        for name in EXECUTION_FIELDS:
            data.pop(name)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def groups(self) -> list[tuple[float, str, int]]:
        """(temperature, rule, seed): each has one plain reference per prompt."""
        return [(t, r, s) for t in self.temperatures for r in self.rules for s in self.seeds]


_LISTS = {"models": str, "proposers": str, "tasks": str, "temperatures": float, "rules": str,
          "budgets": int, "seeds": int}
_SCALARS = {"split": str, "limit": int, "gen_length": int, "block_length": int, "num_fewshot": int,
            "exact": bool, "workers": int}


def load_suite(path: str | Path) -> dict[str, Any]:
    """The settings of a YAML suite file (a mapping of Suite fields), checked for names and types."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(f"cannot read suite {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise UserError(f"suite {path} is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise UserError(f"suite {path} must be a mapping of settings, e.g. 'models: [sdar-a]'")
    return {name: _coerce(name, value, f"suite {path}") for name, value in data.items()}


def build_suite(file_settings: dict[str, Any], overrides: dict[str, Any]) -> Suite:
    """Defaults < suite file < command-line flags (None = not given)."""
    settings = file_settings | {k: v for k, v in overrides.items() if v is not None}
    settings = {k: _coerce(k, v, "flag") for k, v in settings.items()}
    suite = Suite(**settings)
    validate(suite)
    return suite


def _coerce(name: str, value: Any, where: str) -> Any:
    known = {f.name for f in fields(Suite)}
    if name not in known:
        raise UserError(f"{where}: unknown setting {name!r}; known: {', '.join(sorted(known))}")
    if name in _LISTS:
        items = value if isinstance(value, (list, tuple)) else [value]
        if not items:
            raise UserError(f"{where}: {name} must not be empty")
        return tuple(_scalar(name, item, _LISTS[name], where) for item in items)
    if value is None and name in ("num_fewshot", "workers"):
        return None
    return _scalar(name, value, _SCALARS[name], where)


def _scalar(name: str, value: Any, kind: type, where: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{where}: {name} must be {kind.__name__}, got {value!r}")
    return value


def validate(suite: Suite) -> None:
    """Every name resolvable and every number in range, before Ray or any model starts."""
    from harness.decoding import parse_rule
    from harness.targets.families import FAMILIES
    from harness.targets.tiny import parse_tiny_name
    from harness.targets.zoo import zoo_names
    from proposers import check_arm_for_model, check_proposer
    from tasks.registry import get_task

    for model in suite.models:
        if model.startswith("tiny-random"):
            parse_tiny_name(model)
        elif model not in zoo_names() and not Path(model).is_dir():
            zoo = ", ".join(zoo_names()) or "none built"
            raise UserError(f"unknown model {model!r}; use a zoo model ({zoo}), "
                            "tiny-random:<family>[:seed] or a checkpoint folder")
    for proposer in suite.proposers:
        check_proposer(proposer)
        for model in suite.models:  # a proposer fitted to one model and block length (a Spiffy graph)
            check_arm_for_model(proposer, model, suite.block_length)
    for name in suite.tasks:
        task = get_task(name)
        if suite.split not in task.splits:
            raise UserError(f"task {name!r} has no split {suite.split!r}; splits: {', '.join(task.splits)}")
    for rule in suite.rules:
        parse_rule(rule, next(iter(FAMILIES.values())), 0)
    checks = [
        (suite.limit > 0, f"limit must be positive, got {suite.limit}"),
        (all(math.isfinite(t) and t >= 0 for t in suite.temperatures), "temperatures must be finite and >= 0"),
        (all(b >= 0 for b in suite.budgets), "budgets must be >= 0"),
        (all(0 <= s < 2**63 for s in suite.seeds), "seeds must be in [0, 2**63)"),
        (suite.block_length > 0 and suite.gen_length > 0 and suite.gen_length % suite.block_length == 0,
         f"gen_length ({suite.gen_length}) must be a positive multiple of block_length ({suite.block_length})"),
        (suite.num_fewshot is None or suite.num_fewshot >= 0, "num_fewshot must be >= 0"),
        (suite.workers is None or suite.workers > 0, "workers must be positive"),
    ]
    for ok, message in checks:
        if not ok:
            raise UserError(message)
    for name, values in (("models", suite.models), ("proposers", suite.proposers), ("tasks", suite.tasks),
                         ("temperatures", suite.temperatures), ("rules", suite.rules),
                         ("budgets", suite.budgets), ("seeds", suite.seeds)):
        if len(set(values)) != len(values):
            raise UserError(f"{name} lists a value twice: {list(values)}")

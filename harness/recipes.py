"""Reading a recipe (a YAML mapping) into a frozen dataclass, with one-line errors, and the optimisation
block every recipe embeds.

Every trained artefact (zoo targets, SPOT proposers) is rebuilt from a committed recipe, so a typo in
a key must fail loudly rather than silently fall back to a default, and a value of the wrong type or
range must fail when the recipe is read, before any folder is made. A recipe's field annotations are
its schema (types from harness/validation.py); a flag that overrides a field goes through the same
validator as the line of the file it replaces.

The optimisation settings (steps, minibatch, AdamW, schedule, clipping, checkpoints) are one
`Optimizer` block, `optimizer:` in every recipe: each recipe class gives its own defaults (a SPOT
step draws 256 examples, a conversion step 8 sequences), and a recipe file names only what differs.
Recipes recorded before the block (the JSON in a checkpoint or a training state) held these fields at
the top level: `nested_layout` reads them as today's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from harness.errors import UserError
from harness.validation import Count, NonNegative, NonNegativeInt, Positive, check_fields, construct, read_mapping

RecipeT = TypeVar("RecipeT")


@dataclass(frozen=True)
class Optimizer:
    """AdamW under a warmup-cosine schedule (`harness.training.loop`), as every recipe trains."""

    steps: Count
    batch_size: Count
    """Training examples per optimizer step (a minibatch)."""
    learning_rate: Positive = 1e-3
    warmup_steps: NonNegativeInt = 0
    weight_decay: NonNegative = 0.0
    grad_clip: Positive = 1.0
    """The gradients' largest global norm."""
    checkpoint_every: Count = 100
    """Steps between two saves of the resumable training state."""


OPTIMIZER_FIELDS = tuple(f.name for f in dataclasses.fields(Optimizer))


def load_recipe(cls: type[RecipeT], path: str | Path, flags: Mapping[str, Any] | None = None) -> RecipeT:
    """The recipe at `path`; `flags` (field name -> value, None = not given) replace its values and
    are named `--field-name` in messages. A flag may name a field of the `optimizer` block (`steps`)."""
    where = f"recipe {path}"
    settings = dict(read_mapping(path, "recipe"))
    for name in settings:
        if name in OPTIMIZER_FIELDS:
            raise UserError(
                f"{where}: {name} is a setting of the optimizer block; write it as optimizer: {{{name}: ...}}"
            )
    block = settings.pop("optimizer", None) or {}
    if not isinstance(block, dict):
        raise UserError(f"{where}: optimizer must be a mapping of settings, e.g. {{steps: 1000, batch_size: 8}}")
    given = {name: value for name, value in (flags or {}).items() if value is not None}
    block_flags = {name: given.pop(name) for name in list(given) if name in OPTIMIZER_FIELDS}
    settings = check_fields(cls, settings, lambda name: f"{where}: {name}")
    settings |= check_fields(cls, given, lambda name: "--" + name.replace("_", "-"))
    block = check_fields(Optimizer, block, lambda name: f"{where}: optimizer: {name}")
    block |= check_fields(Optimizer, block_flags, lambda name: "--" + name.replace("_", "-"))
    schema: Any = cls  # a recipe dataclass whose `optimizer` field defaults to its class's block
    default = cast(Optimizer, next(f.default for f in dataclasses.fields(schema) if f.name == "optimizer"))
    settings["optimizer"] = construct(Optimizer, dataclasses.asdict(default) | block, f"{where}: optimizer")
    return construct(cls, settings, where)


def nested_layout(saved: dict) -> dict:
    """A recorded recipe in today's layout: the optimisation fields that recipes recorded at the top
    level before the `optimizer` block existed move into it (as the block's keys, in its order)."""
    flat = {name: saved[name] for name in OPTIMIZER_FIELDS if name in saved}
    if not flat:
        return saved
    rest = {name: value for name, value in saved.items() if name not in OPTIMIZER_FIELDS}
    return rest | {"optimizer": dict(saved.get("optimizer") or {}) | flat}

"""Reading a recipe (a YAML mapping) into a frozen dataclass, with one-line errors.

Every trained artefact (zoo targets, SPOT proposers) is rebuilt from a committed recipe, so a typo in
a key must fail loudly rather than silently fall back to a default.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TypeVar

import yaml

from harness.errors import UserError

RecipeT = TypeVar("RecipeT")


def load_recipe(cls: type[RecipeT], path: str | Path) -> RecipeT:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise UserError(f"cannot read recipe {path}: {error}") from None
    if not isinstance(raw, dict):
        raise UserError(f"recipe {path} must be a YAML mapping")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UserError(f"recipe {path}: unknown keys {unknown}; allowed: {sorted(known)}")
    try:
        return cls(**raw)
    except (TypeError, ValueError) as error:
        raise UserError(f"recipe {path}: {error}") from None

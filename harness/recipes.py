"""Reading a recipe (a YAML mapping) into a frozen dataclass, with one-line errors.

Every trained artefact (zoo targets, SPOT proposers) is rebuilt from a committed recipe, so a typo in
a key must fail loudly rather than silently fall back to a default, and a value of the wrong type or
range must fail when the recipe is read, before any folder is made. A recipe's field annotations are
its schema (types from harness/validation.py); a flag that overrides a field goes through the same
validator as the line of the file it replaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from harness.validation import check_fields, construct, read_mapping

RecipeT = TypeVar("RecipeT")


def load_recipe(cls: type[RecipeT], path: str | Path, flags: Mapping[str, Any] | None = None) -> RecipeT:
    """The recipe at `path`; `flags` (field name -> value, None = not given) replace its values and
    are named `--field-name` in messages."""
    where = f"recipe {path}"
    settings = check_fields(cls, read_mapping(path, "recipe"), lambda name: f"{where}: {name}")
    given = {name: value for name, value in (flags or {}).items() if value is not None}
    settings |= check_fields(cls, given, lambda name: "--" + name.replace("_", "-"))
    return construct(cls, settings, where)

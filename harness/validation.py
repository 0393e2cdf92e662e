"""One validation layer for what users type and write: command-line flags, suite files and recipes.

Every setting has one typed field (a pydantic-validated annotation with its constraints and a phrase
saying what it accepts). A value goes through that field's validator whether it came from a flag (as
text) or from a YAML file, so both give the same message, `<where> must be <what>, got <value>`, and
the phrase names the fix. Failures are `UserError`s, which the CLI prints as one line (exit 2); the
commands validate before Ray starts or anything is written.
"""

from __future__ import annotations

import dataclasses
import numbers
import operator
import typing
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from harness.bundled import find
from harness.errors import UserError

T = TypeVar("T")


def accepts(base: type, what: str, optional: bool = False, **constraints: Any) -> Any:
    """`base` with pydantic constraints (`ge`, `lt`, `allow_inf_nan`, ...) whose every failure reads
    'must be <what>'; a bool is not a number here (YAML `true` would otherwise pass as 1); with
    `optional`, None (YAML `null`) is accepted as "not set". A field annotated
    `Annotated[base, accepts_check(base, ...)]` (`base | None` when optional) is the same type, spelt
    so that a type checker reads it."""
    return Annotated[base, accepts_check(base, what, optional, **constraints)]


def accepts_check(base: type, what: str, optional: bool = False, **constraints: Any) -> PlainValidator:
    """The validator of `accepts(base, what, optional, **constraints)`."""
    annotation: Any = Annotated[base, Field(**constraints)]  # a type built at run time
    inner = TypeAdapter(annotation)

    def check(value: Any) -> Any:
        if value is None and optional:
            return None
        if value is None or (isinstance(value, bool) and base is not bool):
            raise PydanticCustomError("invalid", "must be {what}", {"what": what})
        try:
            return inner.validate_python(value)
        except ValidationError:
            raise PydanticCustomError("invalid", "must be {what}", {"what": what}) from None

    return PlainValidator(check)


def rejected(sentence: str) -> PydanticCustomError:
    """A validator's failure told in its own words (they name the value), e.g. a bad rule."""
    return PydanticCustomError("rejected", "{sentence}", {"sentence": sentence})


def _as_list(value: Any) -> Any:
    """A list setting from a flag ('2,4,8'), a YAML list, or one bare value."""
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")] if value.strip() else []
        if "" in items:
            raise PydanticCustomError("invalid", "must list comma-separated values with none empty")
        return items
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _distinct(values: tuple) -> tuple:
    if len(set(values)) != len(values):
        raise PydanticCustomError("invalid", "must list each value once")
    return values


AS_LIST, NON_EMPTY, DISTINCT = BeforeValidator(_as_list), Field(min_length=1), AfterValidator(_distinct)
"""The checks of `listed`: `Annotated[tuple[X, ...], AS_LIST, NON_EMPTY, DISTINCT]` is `listed(X)` spelt
so that a type checker reads it."""


def listed(kind: Any) -> Any:
    """A non-empty tuple of distinct `kind` values, written as a YAML list or comma-separated text."""
    return Annotated[tuple[kind, ...], AS_LIST, NON_EMPTY, DISTINCT]


def options_of(cls: type, exclude: tuple[str, ...] = ()) -> Any:
    """A dict of keyword arguments for dataclass `cls` (a recipe's `model:`), each value validated by
    the type of its field, so a wrong one fails when the recipe is read, not deep inside training.
    A field annotated `Annotated[dict, options_check(cls)]` is the same type, spelt so that a type
    checker reads it (a dict)."""
    return Annotated[dict, options_check(cls, exclude)]


def options_check(cls: type, exclude: tuple[str, ...] = ()) -> AfterValidator:
    """The validator of `options_of(cls, exclude)`."""

    def check(options: dict) -> dict:
        known = [f.name for f in dataclasses.fields(cls) if f.name not in exclude]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise rejected(f"{', '.join(unknown)} is not a setting here; known: {', '.join(known)}")
        hints = typing.get_type_hints(cls)
        checked = {}
        for name, value in options.items():
            try:
                checked[name] = _adapter(hints[name]).validate_python(value)
            except ValidationError:
                raise rejected(f"{name} must be {_kind_name(hints[name])}, got {_shown(value)}") from None
            if dataclasses.is_dataclass(checked[name]):
                checked[name] = dataclasses.asdict(checked[name])
        return checked

    return AfterValidator(check)


def _kind_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


Count = accepts(int, "a whole number >= 1", ge=1)
NonNegativeInt = accepts(int, "a whole number >= 0", ge=0)
Seed = accepts(int, "a whole number in [0, 2**64)", ge=0, lt=2**64)
NonNegative = accepts(float, "a finite number >= 0", ge=0, allow_inf_nan=False)
Positive = accepts(float, "a finite number > 0", gt=0, allow_inf_nan=False)
Fraction = accepts(float, "a finite number in [0, 1]", ge=0, le=1, allow_inf_nan=False)
Text = accepts(str, "non-empty text", min_length=1)
Switch = accepts(bool, "true or false")
OptionalSeed = accepts(int, "a whole number in [0, 2**64)", optional=True, ge=0, lt=2**64)
"""A seed, or None (YAML `null`) for "not set"."""
# lists of the above (`listed`), named so that a field's annotation is a name (a type checker reads
# no call in an annotation)
Texts = listed(Text)
Counts = listed(Count)
Seeds = listed(Seed)

MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3
"""Sampling temperatures other than 0 (greedy): below 0.001 sampling is greedy decoding with extra
steps, above 1000 it is uniform noise, and far outside (T >= 1e30, T = 5e-324) the tempered float32
logits overflow, so such values are refused where a setting is read, never in a proposer."""
_TEMPERATURE = f"a finite number >= 0: 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]"


def _temperature(value: Any) -> float:
    try:
        number = check_value(NonNegative, value, "")
    except UserError:
        number = None
    if number is None or (number != 0 and not MIN_TEMPERATURE <= number <= MAX_TEMPERATURE):
        raise PydanticCustomError("invalid", "must be {what}", {"what": _TEMPERATURE})
    return number


Temperature = Annotated[float, PlainValidator(_temperature)]
"""A sampling temperature: 0, or a number in [MIN_TEMPERATURE, MAX_TEMPERATURE]."""
Temperatures = listed(Temperature)


def strict(kind: Any, base: type) -> Any:
    """`kind` for library callers (config types such as `DecodeConfig`): nothing is parsed from text
    and nothing rounded, so a seed 1.5, True or "3" is refused where it is given rather than read as 1
    or failing later. `base` int takes any integer (`operator.index`: numpy and torch integers too),
    float any real number; then `kind` checks the value as it checks a flag's."""

    def check(value: Any) -> Any:
        if not isinstance(value, (bool, str, bytes)):
            try:
                return _adapter(kind).validate_python(
                    operator.index(value) if base is int else value if isinstance(value, numbers.Real) else None
                )
            except TypeError:  # not an integer
                pass
        name = "an int" if base is int else "a number"
        raise PydanticCustomError(
            "invalid", "must be {what} (not {kind})", {"what": name, "kind": type(value).__name__}
        )

    return Annotated[base, PlainValidator(check)]


def read_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """The settings in a YAML file (`what` names it in errors: 'suite', 'recipe'), read as UTF-8."""
    try:
        data = yaml.safe_load(find(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(f"cannot read {what} {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UserError(f"cannot read {what} {path}: not UTF-8 text; save it as UTF-8") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise UserError(f"cannot read {what} {path}: not valid YAML{where}; fix the syntax there") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} must be a mapping of settings, e.g. 'name: value' lines")
    return data


def check_value(kind: Any, value: T, where: str) -> T:
    """One value validated by `kind` (a type above); `where` names it (a flag, a setting)."""
    try:
        return _adapter(kind).validate_python(value)
    except ValidationError as error:
        raise UserError(message(error, lambda _: where)) from None


def check_fields(schema: type, values: Mapping[str, Any], where: Callable[[str], str]) -> dict[str, Any]:
    """Each of `values` (by field name) validated by its field of dataclass `schema` alone; `where(name)`
    says where a value came from (a flag, a line of a file) for the message."""
    known = [f.name for f in dataclasses.fields(schema)]
    for name in values:
        if name not in known:
            raise UserError(f"{where(name)} is an unknown setting; known: {', '.join(known)}")
    hints = typing.get_type_hints(schema, include_extras=True)
    return {name: check_value(hints[name], value, where(name)) for name, value in values.items()}


def construct(schema: type[T], values: Mapping[str, Any], where: str) -> T:
    """Dataclass `schema` built from `values` by its field validators and its own cross-field checks
    (`__post_init__` raising ValueError); `where` prefixes the message ('recipe r.yaml')."""
    check_fields(schema, values, lambda name: f"{where}: {name}")
    kind: Any = schema  # a dataclass: hashable, as _adapter's cache needs (mypy cannot tell of a type[T])
    try:
        return _adapter(kind).validate_python(dict(values))
    except ValidationError as error:
        raise UserError(message(error, lambda name: f"{where}: {name}" if name else where)) from None


def message(error: ValidationError, where: Callable[[str], str]) -> str:
    """The first failure as one line: '<where> must be <what>, got <value>'."""
    first = error.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    kind, value = first["type"], first.get("input")
    if kind == "value_error":  # a cross-field check of the schema: its own sentence
        return f"{where('')}: {first['ctx']['error']}"
    if kind == "missing":
        return f"{where(name)} is missing; add it"
    if kind == "rejected":  # the validator's own sentence, with the value in it
        return f"{where(name)}: {first['msg']}"
    problem = first["msg"] if kind == "invalid" else PROBLEMS.get(kind, first["msg"])
    return f"{where(name)} {problem}, got {_shown(value)}"


PROBLEMS = {
    "too_short": "must list at least one value",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be text",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
}
"""Pydantic's own failures (plain annotations, containers), worded like the types above."""


def _shown(value: Any) -> str:
    """A value as the user wrote it: a flag's text and the same YAML scalar read alike."""
    return value if isinstance(value, str) and value.strip() else repr(value)


@cache
def _adapter(kind: Any) -> TypeAdapter:
    return TypeAdapter(kind)

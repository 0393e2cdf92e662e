"""What a published checkpoint format is, and a config.json reader that names the file in errors.

A format is three pure functions: config.json -> `ModelConfig` (refusing what the forward pass does
not implement), `ModelConfig` -> config.json, and the tensor-name map between the published names
and `DLMTransformer.state_dict()` names. A published tensor may fuse several of ours (concatenated
along dim 0, e.g. Bailing's `query_key_value`), so the map is published name -> our names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from harness.errors import UserError
from harness.targets.model import ModelConfig

TensorMap = dict[str, tuple[str, ...]]
_REQUIRED = object()


class ConfigReader:
    """Typed access to a config.json; every error is one line that names the file and the key."""

    def __init__(self, raw: dict[str, Any], path: Path):
        self.raw = raw
        self.path = path

    def fail(self, message: str) -> NoReturn:
        raise UserError(f"{self.path}: {message}")

    def _value(self, key: str, default: Any) -> Any:
        if key in self.raw:
            return self.raw[key]
        if default is _REQUIRED:
            self.fail(f"missing required key {key!r}")
        return default

    def integer(self, key: str, default: Any = _REQUIRED) -> int:
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(f"{key} must be a non-negative integer, got {value!r}")
        return value

    def optional_int(self, key: str) -> int | None:
        """An integer key whose absence or null means 'use the derived default'."""
        return None if self.raw.get(key) is None else self.integer(key)

    def number(self, key: str, default: Any = _REQUIRED) -> float:
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(f"{key} must be a number, got {value!r}")
        return float(value)

    def flag(self, key: str, default: Any = _REQUIRED) -> bool:
        value = self._value(key, default)
        if not isinstance(value, bool):
            self.fail(f"{key} must be true or false, got {value!r}")
        return value

    def supported(self, key: str, allowed: tuple[Any, ...], default: Any = _REQUIRED) -> Any:
        """A key whose other values change the architecture in ways spotbench does not implement."""
        value = self._value(key, default)
        if value not in allowed:
            where = "" if key in self.raw else " (the published default when the key is absent)"
            choices = ", ".join(repr(a) for a in allowed)
            self.fail(f"unsupported {key}={value!r}{where}; spotbench supports {choices}")
        return value

    def no_rope_scaling(self) -> None:
        """Only plain RoPE is implemented; scaled variants (linear, dynamic, yarn, llama3) change
        the frequencies and must not load silently."""
        scaling = self.raw.get("rope_scaling")
        if scaling is None:
            return
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
        if kind != "default":
            self.fail(f"unsupported rope_scaling {scaling!r}; spotbench implements plain RoPE only")

    def head_dim(self, hidden: int, heads: int, key: str | None = "head_dim") -> int:
        explicit = self.optional_int(key) if key else None
        if explicit is None and (heads == 0 or hidden % heads):
            self.fail(f"hidden size {hidden} is not divisible by {heads} attention heads")
        return explicit if explicit is not None else hidden // heads


@dataclass(frozen=True)
class CheckpointFormat:
    family: str
    """The spotbench family (families.py) whose conventions a checkpoint of this format follows."""
    model_types: tuple[str, ...]
    """Lower-cased `model_type` values that identify the format."""
    architectures: tuple[str, ...]
    """`architectures` entries that identify the format when `model_type` is absent."""
    read_config: Callable[[ConfigReader], ModelConfig]
    write_config: Callable[[ModelConfig], dict[str, Any]]
    tensor_map: Callable[[ModelConfig], TensorMap]

"""The published checkpoint formats spotbench can read and write, one per target family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.targets.formats.base import CheckpointFormat, ConfigReader, TensorMap
from harness.targets.formats.llada import LLADA
from harness.targets.formats.llada2 import LLADA2
from harness.targets.formats.qwen import DREAM, SDAR

FORMATS: dict[str, CheckpointFormat] = {f.family: f for f in (LLADA, DREAM, SDAR, LLADA2)}

__all__ = ["FORMATS", "CheckpointFormat", "ConfigReader", "TensorMap", "detect_format"]


def detect_format(raw: dict[str, Any], path: Path) -> CheckpointFormat:
    """Pick the format from `model_type`, else from `architectures` (as transformers' Auto classes
    do); anything else, including Bailing/SDAR MoE variants with other routers, is refused."""
    model_type = raw.get("model_type")
    architectures = raw.get("architectures") or []
    for fmt in FORMATS.values():
        if isinstance(model_type, str) and model_type.lower() in fmt.model_types:
            return fmt
        if model_type is None and any(a in fmt.architectures for a in architectures):
            return fmt
    known = ", ".join(f"{t!r} ({f.family})" for f in FORMATS.values() for t in f.model_types)
    found = f"model_type={model_type!r}" if model_type is not None else f"architectures={architectures!r}"
    raise UserError(f"{path}: unknown target family ({found}); spotbench reads model_type {known}")

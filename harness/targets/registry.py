"""Resolve a target name to a loaded `DLMTarget`.

Names: a zoo model (`spotbench zoo` lists them), `tiny-random:<family>[:seed]` (built in code), or a
path to a local Hugging Face checkpoint folder of a supported family.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
from harness.targets.checkpoint import load_checkpoint
from harness.targets.target import DLMTarget
from harness.targets.tiny import parse_tiny_name, tiny_random_target
from harness.targets.zoo import model_dir, zoo_names


def load_target(name: str) -> DLMTarget:
    if name in zoo_names():
        target = load_checkpoint(model_dir(name))
        target.name = name
        return target
    if name.startswith("tiny-random"):
        return tiny_random_target(*parse_tiny_name(name))
    if Path(name).exists():
        return load_checkpoint(name)
    raise UserError(
        f"unknown target {name!r}; use a zoo model ({', '.join(zoo_names()) or 'none built'}), "
        "tiny-random:<family>[:seed] or an existing checkpoint folder"
    )

"""The zoo: tiny targets trained by the project and committed under `zoo/models/<name>/model`
(found through `harness.bundled`, in a checkout or an installed wheel).

Each entry is a checkpoint folder in its family's published format plus the `training.json` report
that `spotbench train-target` wrote; its recipe is `zoo/recipes/<name>.yaml`, so anyone can rebuild
it. `load_target("<name>")` resolves zoo names before paths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.bundled import ZOO_DIR
from harness.targets.hub import local_or_hub

MODELS_DIR = ZOO_DIR / "models"
RECIPES_DIR = ZOO_DIR / "recipes"


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    parameters: int
    size_bytes: int
    training_tokens: int
    heldout_loss: float
    path: str
    recipe: str
    finished: bool = True
    """False while a resumable training (a conversion in pieces) has not reached its recipe's steps."""


def model_dir(name: str) -> Path:
    return MODELS_DIR / name / "model"


def model_folder(name: str) -> Path:
    """The folder (or file) a target name loads from: a zoo model's checkpoint folder, else a local
    path as typed, else a hub id's snapshot in the hub cache (`harness.targets.hub`; the local path wins)."""
    return model_dir(name) if name in zoo_names() else local_or_hub(name)


def zoo_names() -> list[str]:
    if not MODELS_DIR.is_dir():
        return []
    return sorted(p.name for p in MODELS_DIR.iterdir() if (model_dir(p.name) / "training.json").exists())


def zoo_entry(name: str) -> ZooEntry:
    folder = model_dir(name)
    report = json.loads((folder / "training.json").read_text())
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return ZooEntry(
        name=name,
        family=report["family"],
        parameters=report["parameters"],
        size_bytes=size,
        training_tokens=report["training_tokens"],
        heldout_loss=report["heldout_loss"],
        path=str(folder.relative_to(ZOO_DIR.parent)),
        recipe=str((RECIPES_DIR / f"{name}.yaml").relative_to(ZOO_DIR.parent)),
        finished=report.get("finished", True),
    )

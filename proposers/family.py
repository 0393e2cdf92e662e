"""`ProposerFamily`: what the registry knows of one proposer method, declared by the method's package.

Each method package exports its families (`proposers/<method>/family.py`), and `proposers/registry.py`
is only their list and a generic lookup: a method's folder resolution, fit and rule checks and network
caches live beside the method, and a new method touches the registry by one line. The provenance of
a run (`cluster.provenance`) hashes the files a family says its argument names, so a learned
family's checkpoint is an input that resume and gate see change.

Also here: the helpers every family with a folder argument shares (a zoo folder by name, a spec's
name, a model's identity, the device a target runs on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.bundled import ZOO_DIR
from harness.decoding import Generation, Proposer
from harness.decoding.autoregressive import ARProposer
from harness.errors import UserError
from harness.targets.ar import ARTarget
from harness.targets.hub import local_or_hub
from harness.targets.target import DLMTarget
from harness.targets.zoo import model_folder

KINDS = ("oracle", "ceiling", "baseline", "learned")
"""An arm's kind (`harness.pipeline.Arm`): the summary compares learned arms with the best baseline."""


def no_files(argument: str | None) -> list[Path]:
    """A training-free family reads no file: the git revision pins it."""
    return []


def no_models(argument: str | None) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class ProposerFamily:
    name: str
    """What a spec starts with: `name` or `name:argument`."""
    kind: str
    """One of `KINDS`."""
    build: Callable[[str | None, DLMTarget | ARTarget, Generation], Proposer | ARProposer]
    """One proposer for one generation, from (argument, target, the plain generation of the same
    prompt and seed: only the oracles read it)."""
    check: Callable[[str | None], str | None] | None = None
    """Families that take an argument (a folder): validate it (UserError, one line) without building
    anything and return the target it was fitted on (the arm's `trained_on`). None: no argument."""
    files: Callable[[str | None], list[Path]] = no_files
    """Every file the argument names that building reads (a checkpoint folder's files): a run's
    inputs hash them (`cluster.provenance`). A learned family that leaves one out would let the
    checkpoint change under a resumed run unseen: `tests/proposers/test_registry.py` checks it."""
    models: Callable[[str | None], tuple[str, ...]] = no_models
    """Model names the argument loads (`draft-model:NAME`): hashed as a run's targets are."""
    check_for_model: Callable[[str | None, str, int], None] | None = None
    """Families fitted to one target and block length: UserError naming the mismatch."""
    check_for_rule: Callable[[str | None, str], None] | None = None
    """Families fitted to one commit rule: UserError naming the mismatch with a run's rule."""
    targets: tuple[str, ...] = ("dlm",)
    """The target kinds it drafts for (`harness.targets.registry.target_kind`)."""
    distributions: bool = False
    """AR proposers that return their draft distributions q (`DistributionProposer`): the ones that
    can draft in rejection-sampling mode (`--ar-sampling rejection`)."""

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"family {self.name}: kind {self.kind!r} is not one of {KINDS}"


def zoo_folder(argument: str | None, default: str, under: str = "proposers") -> Path:
    """The folder `name:argument` names: a path, a folder name under zoo/<under>/ (`default` without
    an argument) or a hub id (`harness.targets.hub`). The caller checks what it holds."""
    return local_or_hub(argument, ZOO_DIR / under) if argument else ZOO_DIR / under / default


def checkpoint_folder(argument: str | None, default: str, marker: str, what: str, fix: str) -> Path:
    """The folder `name:argument` names (`zoo_folder`), resolved, once it holds `marker`, its method's
    checkpoint file; else a one-line error naming `what` was expected and `fix`."""
    folder = zoo_folder(argument, default)
    if not (folder / marker).is_file():
        raise UserError(f"no {what} in {folder} (expected {marker}); give {fix}")
    return folder.resolve()


def folder_files(folder: Path) -> list[Path]:
    """Every file under a checkpoint folder, sorted."""
    return sorted(p for p in Path(folder).rglob("*") if p.is_file())


def spec_name(name: str, argument: str | None) -> str:
    return f"{name}:{argument}" if argument else name


def device_of(target: DLMTarget | ARTarget | None) -> str:
    return "cpu" if target is None else str(target.device)


def model_identity(name: str) -> str:
    """What a model name points at: a zoo name or hub id and its checkpoint folder are the same model."""
    folder = model_folder(name)
    return str(folder.resolve()) if folder.exists() else name

"""The `psi-linear` and `psi-tree` families: `psi-linear:DIR[:B=4]` and `psi-tree:DIR[:B=5,K=3,V=8]`,
a drafter folder (`spotbench train-drafter`, or its name under zoo/drafters/) for the AR model it was
distilled from, with optional settings after a second colon."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from harness.bundled import ZOO_DIR
from harness.errors import UserError
from harness.targets.ar import ARTarget, folder_of
from harness.targets.hub import local_or_hub
from harness.targets.target import DLMTarget
from proposers.family import ProposerFamily, folder_files
from proposers.psi.lora import GatedLoRAModel, load_drafter, read_meta
from proposers.psi.proposer import PsiLinear, PsiTree

DRAFTERS_DIR = ZOO_DIR / "drafters"
OPTIONS = {"psi-linear": ("B",), "psi-tree": ("B", "K", "V")}
MAX_K, MAX_V = 64, 256
_LOADED: dict[tuple[Path, int], tuple[object, GatedLoRAModel]] = {}


@dataclass(frozen=True)
class PsiSpec:
    folder: Path
    meta: dict
    options: dict[str, int]


def parse_psi(name: str, argument: str | None) -> PsiSpec:
    """`DIR[:B=4,K=3,V=8]` (a folder, or a folder name under zoo/drafters/): UserError if bad."""
    if not argument:
        raise UserError(f"proposer {name} needs a drafter folder: {name}:DIR (spotbench train-drafter writes one)")
    where, _, settings = argument.partition(":")
    folder = local_or_hub(where, DRAFTERS_DIR)
    meta = read_meta(folder)
    options: dict[str, int] = {}
    for item in filter(None, settings.split(",")):
        key, _, value = item.partition("=")
        if key not in OPTIONS[name] or not value.lstrip("-").isdigit():
            raise UserError(f"{name}: cannot parse {item!r}; settings are {', '.join(k + '=N' for k in OPTIONS[name])}")
        options[key] = int(value)
    limits = {"B": (1, meta["max_block"] + 1), "K": (1, MAX_K), "V": (1, MAX_V)}
    for key, number in options.items():
        low, high = limits[key]
        if not low <= number <= high:
            why = f" (the drafter's largest training block is {meta['max_block']} noise rows)" if key == "B" else ""
            raise UserError(f"{name}: {key}={number} is out of range {low}..{high}{why}")
    return PsiSpec(folder.resolve(), meta, options)


def psi_trained_on(name: str, argument: str | None) -> str:
    return parse_psi(name, argument).meta["base"]


def check_psi_fits(name: str, argument: str | None, model: str) -> None:
    """A drafter drafts for the model it was distilled from (by name here; by weights when built)."""
    base = parse_psi(name, argument).meta["base"]
    if _identity(base) != _identity(model):
        raise UserError(
            f"{name}:{argument} is a drafter for model {base!r}, not {model!r}; train one with "
            f"spotbench train-drafter (recipe base: {model})"
        )


def build_psi(name: str, argument: str | None, target: DLMTarget | ARTarget) -> PsiLinear:
    assert isinstance(target, ARTarget)  # checked: the family drafts for AR targets only
    spec = parse_psi(name, argument)
    key = (spec.folder, id(target.model))
    if key not in _LOADED or _LOADED[key][0] is not target.model:
        _LOADED[key] = (target.model, load_drafter(spec.folder, target.model))
    drafter = _LOADED[key][1]
    if name == "psi-linear":
        return PsiLinear(drafter, spec.options.get("B"))
    return PsiTree(
        drafter, spec.options.get("B", spec.meta["max_block"] + 1), spec.options.get("K", 3), spec.options.get("V")
    )


def _identity(name: str) -> str:
    folder = folder_of(name)
    return str(folder.resolve()) if folder.exists() else name


def family(name: str) -> ProposerFamily:
    return ProposerFamily(
        name,
        "learned",
        lambda argument, target, plain: build_psi(name, argument, target),
        functools.partial(psi_trained_on, name),
        files=lambda argument: folder_files(parse_psi(name, argument).folder),
        check_for_model=lambda argument, model, block_length: check_psi_fits(name, argument, model),
        targets=("ar",),
        distributions=name == "psi-linear",
    )


FAMILIES = tuple(family(name) for name in OPTIONS)

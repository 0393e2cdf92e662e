"""Proposers by name, with an optional argument: `name[:argument]`.

`spot` is the zoo's default SPOT checkpoint; `spot:PATH` any SPOT checkpoint folder (or the name of a
folder under zoo/proposers/). Every command and suite names proposers this way, so a study of many
checkpoints is one run: `--proposers confidence,spot,spot:zoo/proposers/spot-sdar-a`.

A factory gets the argument, the target and the plain generation of the same prompt and seed (only
the oracles read the latter) and returns a proposer for that one generation. `check_proposer` refuses
a bad name or argument with one line before anything starts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.decoding import Generation, Proposer
from harness.errors import UserError
from harness.pipeline import Arm
from harness.targets.target import DLMTarget
from harness.targets.zoo import ZOO_DIR
from proposers.confidence import ConfidenceProposer
from proposers.oracle import OracleProposer
from proposers.spot import CONFIG_FILE, DEFAULT_CHECKPOINT, SpotNet, SpotProposer, load_spot


@dataclass(frozen=True)
class Family:
    kind: str
    """`oracle`, `ceiling`, `baseline` or `learned` (see `harness.pipeline.Arm`)."""
    build: Callable[[str | None, DLMTarget, Generation], Proposer]
    takes_checkpoint: bool = False


PROPOSERS: dict[str, Family] = {
    "oracle": Family("oracle", lambda arg, target, plain: OracleProposer(plain.steps)),
    "oracle-order": Family("ceiling", lambda arg, target, plain: OracleProposer(plain.steps, stale_tokens=True)),
    "confidence": Family("baseline", lambda arg, target, plain: ConfidenceProposer()),
    "confidence-branch": Family("baseline", lambda arg, target, plain: ConfidenceProposer(branch=True)),
    "spot": Family("learned", lambda arg, target, plain: SpotProposer(spot_net(spot_folder(arg), device_of(target))),
                   True),
}


def parse_proposer(spec: str) -> tuple[Family, str | None]:
    name, sep, argument = spec.partition(":")
    family = PROPOSERS.get(name)
    if family is None:
        raise UserError(f"unknown proposer {spec!r}; choose one of: {', '.join(PROPOSERS)} (spot:PATH for a checkpoint)")
    if sep and not family.takes_checkpoint:
        raise UserError(f"proposer {name!r} takes no argument; drop ':{argument}'")
    if sep and not argument:
        raise UserError(f"proposer {spec!r} names no checkpoint; give {name}:PATH or just {name}")
    return family, argument or None


def check_proposer(spec: str) -> Arm:
    """A proposer spec resolved without building anything (an Arm with budget 0): UserError if bad."""
    family, argument = parse_proposer(spec)
    trained_on = None
    if family.takes_checkpoint:
        folder = spot_folder(argument)
        provenance = json.loads((folder / CONFIG_FILE).read_text()).get("provenance", {})
        trained_on = provenance.get("target")
    return Arm(spec, 0, family.kind, trained_on)


def arms(specs: list[str] | tuple[str, ...], budgets: list[int] | tuple[int, ...]) -> list[Arm]:
    """Every (proposer, budget) arm, proposer-major, with each proposer's kind and training target."""
    resolved = [check_proposer(spec) for spec in specs]
    return [Arm(arm.proposer, budget, arm.kind, arm.trained_on) for arm in resolved for budget in budgets]


def build_proposer(spec: str, target: DLMTarget, plain: Generation) -> Proposer:
    family, argument = parse_proposer(spec)
    return family.build(argument, target, plain)


def spot_folder(argument: str | None) -> Path:
    """The checkpoint folder `spot:argument` names: a path, or a folder name under zoo/proposers/."""
    folder = Path(argument) if argument else ZOO_DIR / "proposers" / DEFAULT_CHECKPOINT
    if argument and not folder.exists() and (ZOO_DIR / "proposers" / argument).exists():
        folder = ZOO_DIR / "proposers" / argument
    if not (folder / CONFIG_FILE).is_file():
        raise UserError(f"no SPOT checkpoint in {folder} (expected {CONFIG_FILE}); give spot:PATH of a folder "
                        "written by spotbench train-proposer")
    return folder.resolve()


@functools.cache
def spot_net(folder: Path, device: str = "cpu") -> SpotNet:
    """A SPOT checkpoint on the target's device, loaded once per process (a worker decodes many
    prompts with it)."""
    return load_spot(folder).to(device)


def device_of(target: DLMTarget | None) -> str:
    return "cpu" if target is None else str(target.device)

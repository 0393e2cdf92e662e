"""Proposers by name, with an optional argument: `name[:argument]`.

Every command and suite names proposers this way (`confidence`, `spot`, `spot:PATH`,
`psi-tree:DIR:B=5,K=3,V=8`; README.md lists the names), so a study of many checkpoints is one run:
`--proposers confidence,spot,spot:zoo/proposers/spot-sdar-a`.

Each method package declares its families (`proposers/<method>/family.py`, a `ProposerFamily` of
`proposers/family.py`): how to build a proposer for one generation from the argument, the target and
the plain generation of the same prompt and seed (only the oracles read the latter), which files the
argument names (a run's inputs hash them), and which targets and rules it fits. This module is their
list and the generic lookup, with nothing of any one method. `check_proposer` refuses a bad name or
argument with one line before anything starts; `check_arm_for_model` refuses a proposer fitted to
another target, block length or rule than the run's, and one that drafts for the other kind of
target (DLM proposers draft block states, AR proposers token sequences).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

from harness.decoding import Generation, Proposer
from harness.decoding.ar_rejection import COUPLED
from harness.decoding.autoregressive import ARProposer
from harness.errors import UserError
from harness.pipeline import AUTO, Arm
from harness.targets.ar import ARTarget
from harness.targets.registry import target_kind
from harness.targets.target import DLMTarget
from proposers.baselines.family import FAMILIES as BASELINES
from proposers.family import ProposerFamily
from proposers.psi.family import FAMILIES as PSI
from proposers.spiffy.family import FAMILY as SPIFFY
from proposers.spot.family import FAMILY as SPOT
from proposers.spot_sets.family import FAMILY as SPOT_SETS

FAMILIES: tuple[ProposerFamily, ...] = (*BASELINES, SPIFFY, SPOT, SPOT_SETS, *PSI)
"""Every proposer family, in the order names are listed (`proposers_for`, error messages)."""
PROPOSERS: dict[str, ProposerFamily] = {family.name: family for family in FAMILIES}


def parse_proposer(spec: str) -> tuple[ProposerFamily, str | None]:
    name, sep, argument = spec.partition(":")
    family = PROPOSERS.get(name)
    if family is None:
        raise UserError(
            f"unknown proposer {spec!r}; choose one of: {', '.join(PROPOSERS)} "
            "(NAME:PATH for a checkpoint or calibration folder)"
        )
    if sep and family.check is None:
        raise UserError(f"proposer {name!r} takes no argument; drop ':{argument}'")
    if sep and not argument:
        raise UserError(f"proposer {spec!r} names no folder; give {name}:PATH or just {name}")
    return family, argument or None


def check_proposer(spec: str) -> Arm:
    """A proposer spec resolved without building anything (an Arm with budget 0): UserError if bad."""
    family, argument = parse_proposer(spec)
    trained_on = family.check(argument) if family.check else None
    return Arm(spec, 0, family.kind, trained_on)


def check_arm_for_model(spec: str, model: str, block_length: int, rules: Sequence[str] = ()) -> None:
    """UserError (one line) if the proposer was fitted to another target or block length than the run's,
    or to another rule than one of the run's `rules`."""
    family, argument = parse_proposer(spec)
    kind = target_kind(model)
    if kind not in family.targets:
        raise UserError(
            f"proposer {spec!r} drafts for {' and '.join(KIND_NAMES[k] for k in family.targets)} targets, "
            f"but model {model!r} is {KIND_NAMES[kind]}; its proposers: {', '.join(proposers_for(kind))}"
        )
    if family.check_for_model:
        family.check_for_model(argument, model, block_length)
    check_rule = family.check_for_rule
    if check_rule:
        for rule in rules:
            check_rule(argument, rule)


def check_sampling(spec: str, model: str, sampling: str) -> None:
    """UserError (one line) if rejection-sampling mode is asked of a target or proposer that cannot
    take it: it needs an autoregressive target and a proposer that returns its draft distributions."""
    if sampling == COUPLED:
        return
    family, _ = parse_proposer(spec)
    if target_kind(model) != "ar":
        raise UserError(
            f"--ar-sampling {sampling} is for autoregressive targets; model {model!r} is a diffusion "
            "target (its arms are always coupled): run it with --ar-sampling coupled"
        )
    if not family.distributions:
        givers = [name for name, f in PROPOSERS.items() if f.distributions]
        raise UserError(
            f"--ar-sampling {sampling} needs the draft distributions q, which proposer {spec!r} does not "
            f"give; use {', '.join(givers)}, or --ar-sampling coupled"
        )


KIND_NAMES = {"dlm": "diffusion (DLM)", "ar": "autoregressive"}


def proposers_for(kind: str) -> list[str]:
    """The proposer families that draft for a target kind (`dlm` or `ar`), in registry order."""
    return [name for name, family in PROPOSERS.items() if kind in family.targets]


def arms(specs: list[str] | tuple[str, ...], budgets: list[int | str] | tuple[int | str, ...]) -> list[Arm]:
    """Every (proposer, budget) arm, proposer-major, with each proposer's kind and training target;
    budget `auto` is `AUTO` until a worker chooses it (`cluster.unit_decoder`)."""
    resolved = [check_proposer(spec) for spec in specs]
    return [
        Arm(arm.proposer, AUTO if budget == "auto" else cast(int, budget), arm.kind, arm.trained_on)
        for arm in resolved
        for budget in budgets
    ]


def build_proposer(spec: str, target: DLMTarget | ARTarget, plain: Generation) -> Proposer | ARProposer:
    family, argument = parse_proposer(spec)
    return family.build(argument, target, plain)


def proposer_inputs(spec: str) -> tuple[list[Path], tuple[str, ...]]:
    """What a spec's argument names for a run's inputs (`cluster.provenance`): the files building it
    reads, and the model names it loads (hashed as targets are)."""
    family, argument = parse_proposer(spec)
    return family.files(argument), family.models(argument)

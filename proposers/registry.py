"""Proposers by name, with an optional argument: `name[:argument]`.

`spot` is the zoo's default SPOT checkpoint; `spot:PATH` any SPOT checkpoint folder (or the name of a
folder under zoo/proposers/). `spot-sets` is the zoo's SPOT-Sets checkpoint (sdar-a, threshold:0.9);
`spot-sets:PATH` any SPOT-Sets folder, calibrated (`spotbench calibrate`) or not. `spiffy` is the
zoo's Spiffy graph for sdar-a; `spiffy:DIR` any calibration folder (`spotbench calibrate-spiffy`),
named the same way. `psi-linear:DIR` and `psi-tree:DIR` are Psi-Spec drafters (a folder written by
`spotbench train-drafter`, or its name under zoo/drafters/) with optional settings after a second
colon: `psi-linear:DIR:B=4`, `psi-tree:DIR:B=5,K=3,V=8` (proposers/psi/proposer.py). Every command and
suite names proposers this way, so a study of many checkpoints is one run:
`--proposers confidence,spot,spot:zoo/proposers/spot-sdar-a`.

A factory gets the argument, the target and the plain generation of the same prompt and seed (only
the oracles read the latter) and returns a proposer for that one generation. `check_proposer` refuses
a bad name or argument with one line before anything starts; each family that takes an argument
validates its own. `check_arm_for_model` refuses a proposer fitted to another target or block length
(a Spiffy graph: its patterns are counted on one model's trajectories at one block length; a SPOT-Sets
calibration: fitted to one model), one used under a rule it was not fitted for (SPOT-Sets: top1, or
a tau it was not trained or calibrated for), and one that drafts for the other kind of target: DLM
proposers draft block states, AR proposers (`prompt-lookup`, `draft-model:NAME`: a smaller AR model
with the target's tokenizer) draft token sequences; `oracle` replays
either kind's plain trajectory.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from harness.bundled import ZOO_DIR
from harness.decoding import Generation, Proposer
from harness.decoding.ar_rejection import COUPLED
from harness.decoding.autoregressive import ARProposer
from harness.errors import UserError
from harness.pipeline import AUTO, Arm
from harness.targets.ar import ARTarget
from harness.targets.hub import local_or_hub
from harness.targets.registry import target_kind
from harness.targets.target import DLMTarget
from harness.targets.zoo import model_folder
from proposers.baselines.confidence import ConfidenceProposer
from proposers.baselines.draft_model import build_draft_model, check_draft_fits, check_draft_name
from proposers.baselines.oracle import AROracleProposer, OracleProposer
from proposers.baselines.prompt_lookup import PromptLookupProposer
from proposers.psi import proposer as psi
from proposers.spiffy.draft_graph import DEFAULT_GRAPH, GRAPH_FILE, SpiffyCalibration, SpiffyProposer, load_calibration
from proposers.spot.network import CONFIG_FILE, DEFAULT_CHECKPOINT, SpotNet, load_spot
from proposers.spot.tree import SpotProposer
from proposers.spot_sets import network as spot_sets
from proposers.spot_sets.tree import SpotSetsProposer


@dataclass(frozen=True)
class Family:
    kind: str
    """`oracle`, `ceiling`, `baseline` or `learned` (see `harness.pipeline.Arm`)."""
    build: Callable[[str | None, DLMTarget | ARTarget, Generation], Proposer | ARProposer]
    check: Callable[[str | None], str | None] | None = None
    """Families that take an argument (a folder): validate it (UserError, one line) without building
    anything and return the target it was fitted on (the arm's `trained_on`). None: no argument."""
    check_for_model: Callable[[str | None, str, int], None] | None = None
    """Families fitted to one target and block length: UserError naming the mismatch."""
    targets: tuple[str, ...] = ("dlm",)
    """The target kinds it drafts for (`harness.targets.registry.target_kind`)."""
    check_for_rule: Callable[[str | None, str], None] | None = None
    """Families fitted to one commit rule: UserError naming the mismatch with a run's rule."""
    distributions: bool = False
    """AR proposers that return their draft distributions q (`DistributionProposer`): the ones that
    can draft in rejection-sampling mode (`--ar-sampling rejection`)."""


def spot_trained_on(argument: str | None) -> str | None:
    provenance = json.loads((spot_folder(argument) / CONFIG_FILE).read_text()).get("provenance", {})
    return provenance.get("target")


def spiffy_calibrated_on(argument: str | None) -> str:
    return spiffy_calibration(argument).provenance["target"]


def check_spiffy_fits(argument: str | None, model: str, block_length: int) -> None:
    provenance = spiffy_calibration(argument).provenance
    name = f"spiffy:{argument}" if argument else "spiffy"
    if model_identity(provenance["target"]) != model_identity(model):
        raise UserError(
            f"{name} was calibrated for model {provenance['target']!r}, not {model!r}; calibrate one "
            f"with spotbench calibrate-spiffy --model {model}"
        )
    if provenance["block_length"] != block_length:
        raise UserError(
            f"{name} was calibrated at block length {provenance['block_length']}, not {block_length}; "
            f"calibrate one with spotbench calibrate-spiffy --block-length {block_length}"
        )


def spot_sets_trained_on(argument: str | None) -> str | None:
    return spot_sets.read_meta(spot_sets_folder(argument))["provenance"]["target"]


def check_spot_sets_fits(argument: str | None, model: str, block_length: int) -> None:
    """A calibrated folder is for the model it was calibrated on; an uncalibrated one runs anywhere."""
    calibration = spot_sets.read_calibration(spot_sets_folder(argument))
    if calibration is not None and model_identity(calibration["provenance"]["target"]) != model_identity(model):
        raise UserError(
            f"{spec_name('spot-sets', argument)} was calibrated for model "
            f"{calibration['provenance']['target']!r}, not {model!r}; calibrate one with spotbench "
            f"calibrate {spec_name('spot-sets', argument)} --model {model} --out DIR"
        )


def check_spot_rule(argument: str | None, rule: str) -> None:
    """SPOT orders single commits; under a threshold rule its tree would be the confidence chain's
    (`StaleViewTreeProposer`'s fallback), so a row named `spot` would not be SPOT: refused."""
    if spot_sets.threshold_tau(rule) is not None:
        raise UserError(
            f"{spec_name('spot', argument)} orders single commits (rule top1); under {rule} a pass commits "
            "a set: use spot-sets (or spot-sets:DIR) for threshold rules, in a suite of its own"
        )


def check_spot_sets_rule(argument: str | None, rule: str) -> None:
    """SPOT-Sets drafts threshold sets at the tau its folder was trained for, or calibrated for if it
    holds a calibration (which is fitted at one tau)."""
    folder = spot_sets_folder(argument)
    calibration = spot_sets.read_calibration(folder)
    fitted = (calibration or spot_sets.read_meta(folder))["provenance"]
    name, how = spec_name("spot-sets", argument), "calibrated" if calibration else "trained"
    if spot_sets.threshold_tau(rule) is None:
        raise UserError(
            f"{name} drafts the sets of threshold decoding and was {how} for {fitted['rule']}; rule "
            f"{rule!r} commits one position per step: use spot there, or the rule {fitted['rule']}"
        )
    if spot_sets.threshold_tau(rule) != fitted["tau"]:
        raise UserError(
            f"{name} was {how} for {fitted['rule']}, not {rule}; use the rule {fitted['rule']}, or "
            f"calibrate it for that tau: spotbench calibrate {name} --model M --rule {rule} --out DIR"
        )


def spec_name(name: str, argument: str | None) -> str:
    return f"{name}:{argument}" if argument else name


@functools.cache
def spot_sets_net(folder: Path, device: str = "cpu") -> spot_sets.SpotSetsNet:
    """A SPOT-Sets checkpoint on the target's device, loaded once per process."""
    return spot_sets.load_spot_sets(folder).to(device)


@functools.cache
def spot_net(folder: Path, device: str = "cpu") -> SpotNet:
    """A SPOT checkpoint on the target's device, loaded once per process (a worker decodes many
    prompts with it)."""
    return load_spot(folder).to(device)


def device_of(target: DLMTarget | ARTarget | None) -> str:
    return "cpu" if target is None else str(target.device)


def _draft_model(arg: str | None, target: DLMTarget | ARTarget) -> Proposer | ARProposer:
    assert arg is not None and isinstance(target, ARTarget)  # checked: draft-model:NAME, AR targets only
    return build_draft_model(arg, target)


def _check_draft_fits(arg: str | None, model: str) -> None:
    assert arg is not None  # checked: draft-model:NAME
    check_draft_fits(arg, model)


PROPOSERS: dict[str, Family] = {
    "oracle": Family(
        "oracle",
        lambda arg, target, plain: (
            AROracleProposer(plain.tokens.tolist()) if isinstance(target, ARTarget) else OracleProposer(plain.steps)
        ),
        targets=("dlm", "ar"),
    ),
    "oracle-order": Family("ceiling", lambda arg, target, plain: OracleProposer(plain.steps, stale_tokens=True)),
    "confidence": Family("baseline", lambda arg, target, plain: ConfidenceProposer()),
    "confidence-branch": Family("baseline", lambda arg, target, plain: ConfidenceProposer(branch=True)),
    "spiffy": Family(
        "baseline",
        lambda arg, target, plain: SpiffyProposer(spiffy_calibration(arg)),
        spiffy_calibrated_on,
        check_spiffy_fits,
    ),
    "prompt-lookup": Family("baseline", lambda arg, target, plain: PromptLookupProposer(), targets=("ar",)),
    "draft-model": Family(
        "baseline",
        lambda arg, target, plain: _draft_model(arg, target),
        lambda arg: check_draft_name(arg),
        lambda arg, model, _: _check_draft_fits(arg, model),
        targets=("ar",),
        distributions=True,
    ),
    "spot": Family(
        "learned",
        lambda arg, target, plain: SpotProposer(spot_net(spot_folder(arg), device_of(target))),
        spot_trained_on,
        check_for_rule=check_spot_rule,
    ),
    "spot-sets": Family(
        "learned",
        lambda arg, target, plain: SpotSetsProposer(
            spot_sets_net(spot_sets_folder(arg), device_of(target)), spot_sets.load_calibration(spot_sets_folder(arg))
        ),
        spot_sets_trained_on,
        check_spot_sets_fits,
        check_for_rule=check_spot_sets_rule,
    ),
    **{
        name: Family(
            "learned",
            functools.partial(lambda name, arg, target, plain: psi.build_psi(name, arg, target), name),
            functools.partial(psi.psi_trained_on, name),
            functools.partial(lambda name, arg, model, _: psi.check_psi_fits(name, arg, model), name),
            targets=("ar",),
            distributions=name == "psi-linear",
        )
        for name in psi.OPTIONS
    },
}


def parse_proposer(spec: str) -> tuple[Family, str | None]:
    name, sep, argument = spec.partition(":")
    family = PROPOSERS.get(name)
    if family is None:
        raise UserError(
            f"unknown proposer {spec!r}; choose one of: {', '.join(PROPOSERS)} "
            "(spot:PATH for a checkpoint, spiffy:DIR for a calibration)"
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
    budget `auto` is `AUTO` until a worker chooses it (`cluster.evaluate`)."""
    resolved = [check_proposer(spec) for spec in specs]
    return [
        Arm(arm.proposer, AUTO if budget == "auto" else cast(int, budget), arm.kind, arm.trained_on)
        for arm in resolved
        for budget in budgets
    ]


def build_proposer(spec: str, target: DLMTarget | ARTarget, plain: Generation) -> Proposer | ARProposer:
    family, argument = parse_proposer(spec)
    return family.build(argument, target, plain)


def zoo_folder(argument: str | None, default: str) -> Path:
    """The folder `name:argument` names: a path, or a folder name under zoo/proposers/ (`default`
    without an argument). The caller checks what it holds."""
    return local_or_hub(argument, ZOO_DIR / "proposers") if argument else ZOO_DIR / "proposers" / default


def spot_folder(argument: str | None) -> Path:
    """The checkpoint folder `spot:argument` names."""
    folder = zoo_folder(argument, DEFAULT_CHECKPOINT)
    if not (folder / CONFIG_FILE).is_file():
        raise UserError(
            f"no SPOT checkpoint in {folder} (expected {CONFIG_FILE}); give spot:PATH of a folder "
            "written by spotbench train-proposer"
        )
    return folder.resolve()


def spot_sets_folder(argument: str | None) -> Path:
    """The checkpoint folder `spot-sets:argument` names."""
    folder = zoo_folder(argument, spot_sets.DEFAULT_CHECKPOINT)
    if not (folder / spot_sets.CONFIG_FILE).is_file():
        raise UserError(
            f"no SPOT-Sets checkpoint in {folder} (expected {spot_sets.CONFIG_FILE}); give "
            "spot-sets:PATH of a folder written by spotbench train-proposer or spotbench calibrate"
        )
    return folder.resolve()


def spiffy_calibration(argument: str | None) -> SpiffyCalibration:
    """The calibration `spiffy:argument` names, read once per process."""
    folder = zoo_folder(argument, DEFAULT_GRAPH)
    if not (folder / GRAPH_FILE).is_file():
        raise UserError(
            f"no Spiffy graph in {folder} (expected {GRAPH_FILE}); give spiffy:DIR of a folder "
            "written by spotbench calibrate-spiffy"
        )
    try:
        return load_calibration(folder.resolve())
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{folder / GRAPH_FILE} is not a Spiffy graph file ({error})") from None


def model_identity(name: str) -> str:
    """What a model name points at: a zoo name and its checkpoint folder are the same model."""
    folder = model_folder(name)
    return str(folder.resolve()) if folder.exists() else name

"""The `spot-sets` family: `spot-sets` (the zoo checkpoint, sdar-a, threshold:0.9) and `spot-sets:PATH`
(a folder written by `spotbench train-proposer` or `spotbench calibrate-spot-sets`, or its name under
zoo/proposers/), fitted to one tau and, once calibrated, to one model."""

from __future__ import annotations

import functools
from pathlib import Path

from harness.errors import UserError
from proposers.family import (
    ProposerFamily,
    checkpoint_folder,
    device_of,
    folder_files,
    model_identity,
    spec_name,
)
from proposers.spot_sets.network import (
    CONFIG_FILE,
    DEFAULT_CHECKPOINT,
    SpotSetsNet,
    load_calibration,
    load_spot_sets,
    read_calibration,
    read_meta,
    threshold_tau,
)
from proposers.spot_sets.tree import SpotSetsProposer


def spot_sets_folder(argument: str | None) -> Path:
    """The checkpoint folder `spot-sets:argument` names."""
    fix = "spot-sets:PATH of a folder written by spotbench train-proposer or spotbench calibrate-spot-sets"
    return checkpoint_folder(argument, DEFAULT_CHECKPOINT, CONFIG_FILE, "SPOT-Sets checkpoint", fix)


@functools.cache
def spot_sets_net(folder: Path, device: str = "cpu") -> SpotSetsNet:
    """A SPOT-Sets checkpoint on the target's device, loaded once per process."""
    return load_spot_sets(folder).to(device)


def spot_sets_trained_on(argument: str | None) -> str | None:
    return read_meta(spot_sets_folder(argument))["provenance"]["target"]


def check_spot_sets_fits(argument: str | None, model: str, block_length: int) -> None:
    """A calibrated folder is for the model it was calibrated on; an uncalibrated one runs anywhere."""
    calibration = read_calibration(spot_sets_folder(argument))
    if calibration is not None and model_identity(calibration["provenance"]["target"]) != model_identity(model):
        raise UserError(
            f"{spec_name('spot-sets', argument)} was calibrated for model "
            f"{calibration['provenance']['target']!r}, not {model!r}; calibrate one with spotbench "
            f"calibrate-spot-sets {spec_name('spot-sets', argument)} --model {model} --out DIR"
        )


def check_spot_sets_rule(argument: str | None, rule: str) -> None:
    """SPOT-Sets drafts threshold sets at the tau its folder was trained for, or calibrated for if it
    holds a calibration (which is fitted at one tau)."""
    folder = spot_sets_folder(argument)
    calibration = read_calibration(folder)
    fitted = (calibration or read_meta(folder))["provenance"]
    name, how = spec_name("spot-sets", argument), "calibrated" if calibration else "trained"
    if threshold_tau(rule) is None:
        raise UserError(
            f"{name} drafts the sets of threshold decoding and was {how} for {fitted['rule']}; rule "
            f"{rule!r} commits one position per step: use spot there, or the rule {fitted['rule']}"
        )
    if threshold_tau(rule) != fitted["tau"]:
        raise UserError(
            f"{name} was {how} for {fitted['rule']}, not {rule}; use the rule {fitted['rule']}, or "
            f"calibrate it for that tau: spotbench calibrate-spot-sets {name} --model M --rule {rule} --out DIR"
        )


FAMILY = ProposerFamily(
    "spot-sets",
    "learned",
    lambda argument, target, plain: SpotSetsProposer(
        spot_sets_net(spot_sets_folder(argument), device_of(target)), load_calibration(spot_sets_folder(argument))
    ),
    spot_sets_trained_on,
    files=lambda argument: folder_files(spot_sets_folder(argument)),
    check_for_model=check_spot_sets_fits,
    check_for_rule=check_spot_sets_rule,
)

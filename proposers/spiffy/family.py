"""The `spiffy` family: `spiffy` (the zoo graph for sdar-a) and `spiffy:DIR` (a calibration folder,
`spotbench calibrate-spiffy`, or its name under zoo/proposers/), fitted to one model and block length."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserError
from proposers.family import ProposerFamily, checkpoint_folder, folder_files, model_identity, spec_name
from proposers.spiffy.draft_graph import DEFAULT_GRAPH, GRAPH_FILE, SpiffyCalibration, SpiffyProposer, load_calibration


def spiffy_folder(argument: str | None) -> Path:
    """The calibration folder `spiffy:argument` names."""
    fix = "spiffy:DIR of a folder written by spotbench calibrate-spiffy"
    return checkpoint_folder(argument, DEFAULT_GRAPH, GRAPH_FILE, "Spiffy graph", fix)


def spiffy_calibration(argument: str | None) -> SpiffyCalibration:
    """The calibration `spiffy:argument` names, read once per process."""
    folder = spiffy_folder(argument)
    try:
        return load_calibration(folder)
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{folder / GRAPH_FILE} is not a Spiffy graph file ({error})") from None


def spiffy_calibrated_on(argument: str | None) -> str:
    return spiffy_calibration(argument).provenance["target"]


def check_spiffy_fits(argument: str | None, model: str, block_length: int) -> None:
    """A graph's patterns are counted on one model's trajectories at one block length."""
    provenance = spiffy_calibration(argument).provenance
    name = spec_name("spiffy", argument)
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


FAMILY = ProposerFamily(
    "spiffy",
    "baseline",
    lambda argument, target, plain: SpiffyProposer(spiffy_calibration(argument)),
    spiffy_calibrated_on,
    files=lambda argument: folder_files(spiffy_folder(argument)),
    check_for_model=check_spiffy_fits,
)

"""The `spot` family: `spot` (the zoo checkpoint) and `spot:PATH` (a checkpoint folder written by
`spotbench train-proposer`, or its name under zoo/proposers/); single commits (rule top1) only."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from harness.errors import UserError
from proposers.family import ProposerFamily, checkpoint_folder, device_of, folder_files, spec_name
from proposers.spot.network import CONFIG_FILE, DEFAULT_CHECKPOINT, SpotNet, load_spot
from proposers.spot.tree import SpotProposer


def spot_folder(argument: str | None) -> Path:
    """The checkpoint folder `spot:argument` names."""
    fix = "spot:PATH of a folder written by spotbench train-proposer"
    return checkpoint_folder(argument, DEFAULT_CHECKPOINT, CONFIG_FILE, "SPOT checkpoint", fix)


@functools.cache
def spot_net(folder: Path, device: str = "cpu") -> SpotNet:
    """A SPOT checkpoint on the target's device, loaded once per process (a worker decodes many
    prompts with it)."""
    return load_spot(folder).to(device)


def spot_trained_on(argument: str | None) -> str | None:
    provenance = json.loads((spot_folder(argument) / CONFIG_FILE).read_text()).get("provenance", {})
    return provenance.get("target")


def check_spot_rule(argument: str | None, rule: str) -> None:
    """SPOT orders single commits; under a threshold rule its tree would be the confidence chain's
    (`StaleViewTreeProposer`'s fallback), so a row named `spot` would not be SPOT: refused."""
    if rule.partition(":")[0] == "threshold":
        raise UserError(
            f"{spec_name('spot', argument)} orders single commits (rule top1); under {rule} a pass commits "
            "a set: use spot-sets (or spot-sets:DIR) for threshold rules, in a suite of its own"
        )


FAMILY = ProposerFamily(
    "spot",
    "learned",
    lambda argument, target, plain: SpotProposer(spot_net(spot_folder(argument), device_of(target))),
    spot_trained_on,
    files=lambda argument: folder_files(spot_folder(argument)),
    check_for_rule=check_spot_rule,
)

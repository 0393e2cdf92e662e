"""Draft proposers: the registry and one package per method.

`registry.py` is the one door (proposers by name, `name[:argument]`): a list of the families that the
method packages declare (a `ProposerFamily` of `family.py`, in each package's own `family.py`). The
methods are packages, each with its training and its registry entry: `spot` (SPOT), `spot_sets`
(SPOT-Sets, threshold decoding), `psi` (Psi-Spec, for autoregressive targets), `spiffy` (calibrated
draft graphs) and `baselines` (confidence order, oracles, prompt lookup, draft model). The protocol
(`Proposer`, `DraftRequest`, `DraftTree`) is defined in `harness.decoding.tree`, next to the loop that
calls it, since dependencies point downward (`proposers -> harness`).
"""

from harness.decoding.tree import DraftNode, DraftRequest, DraftTree, Proposer
from proposers.registry import PROPOSERS, arms, build_proposer, check_arm_for_model, check_proposer, check_sampling

__all__ = [
    "PROPOSERS",
    "DraftNode",
    "DraftRequest",
    "DraftTree",
    "Proposer",
    "arms",
    "build_proposer",
    "check_arm_for_model",
    "check_proposer",
    "check_sampling",
]

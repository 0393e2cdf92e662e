"""Draft proposers: the Proposer protocol and its implementations.

The protocol (`Proposer`, `DraftRequest`, `DraftTree`) is defined in `harness.decoding.tree`, next
to the loop that calls it, since dependencies point downward (`proposers -> harness`).
"""

from harness.decoding.tree import DraftNode, DraftRequest, DraftTree, Proposer
from proposers.registry import PROPOSERS, arms, build_proposer, check_arm_for_model, check_proposer, check_sampling

__all__ = ["PROPOSERS", "DraftNode", "DraftRequest", "DraftTree", "Proposer", "arms", "build_proposer",
           "check_arm_for_model", "check_proposer", "check_sampling"]

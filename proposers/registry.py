"""Proposers by name. A factory gets the target and the plain generation of the same prompt and seed
(only the oracle reads the latter) and returns a proposer for that one generation."""

from __future__ import annotations

from collections.abc import Callable

from harness.decoding import Generation, Proposer
from harness.errors import UserError
from harness.targets.target import DLMTarget
from proposers.confidence import ConfidenceProposer
from proposers.oracle import OracleProposer
from proposers.spot import SpotProposer, zoo_spot

ProposerFactory = Callable[[DLMTarget, Generation], Proposer]

PROPOSERS: dict[str, ProposerFactory] = {
    "oracle": lambda target, plain: OracleProposer(plain.steps),
    "oracle-order": lambda target, plain: OracleProposer(plain.steps, stale_tokens=True),
    "confidence": lambda target, plain: ConfidenceProposer(),
    "confidence-branch": lambda target, plain: ConfidenceProposer(branch=True),
    "spot": lambda target, plain: SpotProposer(zoo_spot()),
}


def build_proposer(name: str, target: DLMTarget, plain: Generation) -> Proposer:
    try:
        factory = PROPOSERS[name]
    except KeyError:
        raise UserError(f"unknown proposer {name!r}; choose one of: {', '.join(PROPOSERS)}") from None
    return factory(target, plain)

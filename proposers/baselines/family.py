"""The training-free families: the oracles, the confidence order, prompt lookup and draft models."""

from __future__ import annotations

from harness.decoding import Generation, Proposer
from harness.decoding.autoregressive import ARProposer
from harness.targets.ar import ARTarget
from harness.targets.target import DLMTarget
from proposers.baselines.confidence import ConfidenceProposer
from proposers.baselines.draft_model import build_draft_model, check_draft_fits, check_draft_name
from proposers.baselines.oracle import AROracleProposer, OracleProposer
from proposers.baselines.prompt_lookup import PromptLookupProposer
from proposers.family import ProposerFamily


def oracle(argument: str | None, target: DLMTarget | ARTarget, plain: Generation) -> Proposer | ARProposer:
    """The plain trajectory replayed: token sequences for AR targets, block states for diffusion ones."""
    return AROracleProposer(plain.tokens.tolist()) if isinstance(target, ARTarget) else OracleProposer(plain.steps)


def draft_model(argument: str | None, target: DLMTarget | ARTarget, plain: Generation) -> ARProposer:
    assert argument is not None and isinstance(target, ARTarget)  # checked: draft-model:NAME, AR targets only
    return build_draft_model(argument, target)


def draft_model_checked(argument: str | None) -> None:
    check_draft_name(argument)


def draft_model_fits(argument: str | None, model: str, block_length: int) -> None:
    assert argument is not None  # checked: draft-model:NAME
    check_draft_fits(argument, model)


FAMILIES = (
    ProposerFamily("oracle", "oracle", oracle, targets=("dlm", "ar")),
    ProposerFamily(
        "oracle-order", "ceiling", lambda arg, target, plain: OracleProposer(plain.steps, stale_tokens=True)
    ),
    ProposerFamily("confidence", "baseline", lambda arg, target, plain: ConfidenceProposer()),
    ProposerFamily("confidence-branch", "baseline", lambda arg, target, plain: ConfidenceProposer(branch=True)),
    ProposerFamily("prompt-lookup", "baseline", lambda arg, target, plain: PromptLookupProposer(), targets=("ar",)),
    ProposerFamily(
        "draft-model",
        "baseline",
        draft_model,
        draft_model_checked,
        models=lambda argument: (argument,) if argument else (),
        check_for_model=draft_model_fits,
        targets=("ar",),
        distributions=True,
    ),
)

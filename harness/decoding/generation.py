"""What a decoding arm is asked to do and what it returns, shared by the plain and speculative loops.

Stopping and output (docs/decoding.md): a generation decodes blocks of `block_length` positions
until the block holding answer position `gen_length - 1` is finished or a block finishes with an EOS
among its answer positions. A finished block has no mask, so that EOS has no mask before it and the
answer cannot change any more; this rule is the same for every arm. `Generation.tokens` keeps every
committed answer position (what the lossless check compares); `answer_ids` cuts it at the first EOS
and, for a family whose published generate returns only gen_length positions (LLaDA2), at gen_length
(what gets decoded and scored). On the absolute block grid of block-causal families the first block
starts with the prompt's tail (`Generation.first_state`), which is not part of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from harness.decoding.metrics import Metrics
from harness.decoding.rules import Rule, StepRecord, Transition
from harness.errors import UserError
from harness.validation import Count, Seed, Temperature, check_value, strict

BOUNDED_CONFIDENCES = ("prob", "tempered_prob", "margin")
"""Confidences in [0, 1]: a threshold above 1 is never reached and one at or below 0 always is."""


@dataclass(frozen=True)
class DecodeConfig:
    """What one generation is asked for, checked by the validators that check the same settings in
    suites and flags (library callers get the command line's errors)."""

    rule: Rule
    gen_length: int = 64
    block_length: int = 16
    temperature: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_numbers(self, {"gen_length": Count, "block_length": Count, "temperature": Temperature, "seed": Seed})
        check_rule(self.rule)


def check_numbers(config: object, kinds: dict[str, object]) -> None:
    """A frozen config's numbers, each checked by the validator its setting has in suites and flags
    (`harness.validation`), strictly: a library caller's 1.5 or "3" for a seed is refused, not rounded
    or parsed; integers of numpy or torch are stored as plain ints."""
    for name, kind in kinds.items():
        base = int if kind in (Count, Seed) else float
        object.__setattr__(config, name, check_value(strict(kind, base), getattr(config, name), f"the {name}"))


def check_rule(rule: Rule) -> None:
    """A threshold inside the range of the rule's confidences, where it means what it says."""
    if (
        rule.name == "threshold"
        and rule.confidence in BOUNDED_CONFIDENCES
        and (rule.tau is None or not 0 < rule.tau <= 1)
    ):
        raise UserError(
            f"rule {rule} has tau outside (0, 1], the range of {rule.confidence} confidences; "
            "give a tau in (0, 1], e.g. threshold:0.9"
        )


@dataclass(frozen=True)
class BlockSpan:
    """One finished block of a trajectory: `steps[first:end]` filled it, starting from `start`."""

    index: int
    first: int
    end: int
    start: Tensor
    """[B] the block's state before its first step (the prompt's tail and masks, or all masks)."""

    def states(self, steps: list[Transition]) -> list[Tensor]:
        """[end - first + 1] the block's states: before each of its steps, then the finished block."""
        states = [self.start]
        for transition in steps[self.first : self.end]:
            states.append(transition.apply(states[-1]))
        return states


@dataclass
class Generation:
    tokens: Tensor
    """[L] the committed answer tokens of every finished block (the prompt's tail excluded)."""
    steps: list[Transition]
    """The trajectory: steps[s] is the transition committed at global step s."""
    pass_commits: list[int]
    """Transitions committed by each target pass (all 1 for plain decoding)."""
    records: list[StepRecord] | None
    """The reference (a traced loop): per step, how close the target's decision was (forensics)."""
    metrics: Metrics
    eos_id: int
    pass_logits: list[Tensor] | None = None
    """With `keep_logits`: [s] the target's logits [B, V] for the state before step s (on the CPU)."""
    following: list[Tensor | None] | None = None
    """... and per finished block, the logits its last pass gave the next block (full attention)."""
    stops: list[str] | None = None
    """Why each pass stopped (`harness.decoding.tree.stop_reason`)."""
    first_state: Tensor | None = None
    """[B] a block-diffusion generation's first block before any commit (`TargetSession.first_state`)."""
    answer_length: int | None = None
    """The answer positions the family's published generate returns (gen_length for LLaDA2); None:
    every committed one (SDAR returns the whole canvas, to the end of the last block)."""

    def blocks(self, mask_id: int) -> list[BlockSpan]:
        """The finished blocks of a block-diffusion generation, in order: what a consumer of its
        trajectory (replay, calibration, proposer training data) needs to rebuild every state."""
        if self.first_state is None:
            raise ValueError("only a block-diffusion generation has blocks")
        spans: list[BlockSpan] = []
        start, first, masked = self.first_state, 0, int((self.first_state == mask_id).sum())
        for index, transition in enumerate(self.steps):
            masked -= len(transition.positions)
            if masked == 0:
                spans.append(BlockSpan(len(spans), first, index + 1, start))
                start = torch.full_like(self.first_state, mask_id)
                first, masked = index + 1, start.numel()
        return spans

    @property
    def answer_ids(self) -> list[int]:
        """The answer up to (not including) the first EOS, within `answer_length`."""
        ids = self.tokens.tolist()[: self.answer_length]
        return ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids


def synchronize(logits: Tensor) -> None:
    """Wait for the device, so a pass's time is counted as target time, not at the next host read."""
    if logits.is_cuda:
        torch.cuda.synchronize(logits.device)

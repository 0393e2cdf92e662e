"""What a decoding arm is asked to do and what it returns, shared by the plain and speculative loops.

Stopping and output (docs/decoding.md): a generation decodes blocks of `block_length` positions
until `gen_length` positions are committed or a block finishes with an EOS in it. A finished block
has no mask, so that EOS has no mask before it and the answer cannot change any more; this rule is
the same for every arm. `Generation.tokens` keeps every committed block (what the lossless check
compares); `answer_ids` cuts it at the first EOS (what gets decoded and scored).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.decoding.metrics import Metrics
from harness.decoding.rules import Rule, StepRecord, Transition
from harness.errors import UserError


@dataclass(frozen=True)
class DecodeConfig:
    rule: Rule
    gen_length: int = 64
    block_length: int = 16
    temperature: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise UserError(f"the temperature must be finite and >= 0, got {self.temperature}")
        if not 0 <= self.seed < 2**64:
            raise UserError(f"the seed must be in [0, 2**64), got {self.seed}")


@dataclass
class Generation:
    tokens: Tensor
    """[L] the committed tokens of every finished block (L is a multiple of block_length)."""
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

    @property
    def answer_ids(self) -> list[int]:
        """The answer up to (not including) the first EOS."""
        ids = self.tokens.tolist()
        return ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids


def synchronize(logits: Tensor) -> None:
    """Wait for the device, so a pass's time is counted as target time, not at the next host read."""
    if logits.is_cuda:
        torch.cuda.synchronize(logits.device)

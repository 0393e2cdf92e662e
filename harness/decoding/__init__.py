"""The decoding core: noise, commit rules, the block loop (plain and speculative), draft trees, metrics.

Pure code: no I/O, no Ray, no datasets. The semantics are fixed by DESIGN.md section 3; the
decisions it leaves open are in docs/decoding.md.
"""

from harness.decoding.batch import decode_batch
from harness.decoding.generation import DecodeConfig, Generation
from harness.decoding.metrics import Metrics
from harness.decoding.noise import NoiseSource, gumbel, steps_many
from harness.decoding.rules import Rule, StepRecord, Transition, parse_rule
from harness.decoding.speculative import plain_decode, plain_generation, speculative_decode, speculative_generation
from harness.decoding.tree import DraftNode, DraftRequest, DraftTree, PreparedTree, Proposer, prepare

__all__ = [
    "DecodeConfig",
    "DraftNode",
    "DraftRequest",
    "DraftTree",
    "Generation",
    "Metrics",
    "NoiseSource",
    "PreparedTree",
    "Proposer",
    "Rule",
    "StepRecord",
    "Transition",
    "decode_batch",
    "gumbel",
    "parse_rule",
    "plain_decode",
    "plain_generation",
    "prepare",
    "speculative_decode",
    "speculative_generation",
    "steps_many",
]

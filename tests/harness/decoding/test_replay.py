"""Replay: the passes a proposer saves, computed from a recorded plain generation, are the ones
speculative decoding makes, for every registered proposer, rule, temperature and geometry."""

from __future__ import annotations

import functools

import pytest
import torch

from harness.decoding import DecodeConfig, DraftTree, parse_rule, plain_decode, speculative_decode
from harness.decoding.replay import replay
from harness.decoding.rules import Transition
from harness.decoding.tree import LEAF, NO_DRAFT, POSITION, TOKEN
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer
from proposers.registry import proposers_for

PROMPT = list(b"Q: 2+2=?\nA:")


@functools.cache
def exact_target(family: str) -> DLMTarget:
    return load_dlm_target(f"tiny-random:{family}").exact()


def config(target: DLMTarget, rule: str, temperature: float, geometry: tuple[int, int]) -> DecodeConfig:
    return DecodeConfig(parse_rule(rule, target.family, target.mask_id), geometry[0], geometry[1], temperature, 3)


@pytest.mark.parametrize("family", ["llada", "dream", "sdar", "llada2", "converted"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("rule", ["top1", "threshold:0.02"])
@pytest.mark.parametrize("geometry", [(16, 8), (12, 4)])
def test_replay_counts_the_passes_of_speculative_decoding(family, temperature, rule, geometry):
    target = exact_target(family)
    cfg = config(target, rule, temperature, geometry)
    plain = plain_decode(target, PROMPT, cfg, keep_logits=True)
    assert len(plain.pass_logits) == len(plain.steps) and len(plain.following) == len(plain.blocks(target.mask_id))
    saved_any = False
    for name in proposers_for("dlm"):
        for budget in (0, 1, 5):
            spec = speculative_decode(target, PROMPT, build_proposer(name, target, plain), cfg, budget)
            replayed = replay(plain, build_proposer(name, target, plain), cfg, budget)
            assert (replayed.metrics.nfe, replayed.pass_commits, replayed.stops) == (
                spec.metrics.nfe,
                spec.pass_commits,
                spec.stops,
            ), (name, budget)
            saved_any |= replayed.metrics.nfe < plain.metrics.nfe
    assert saved_any


class Off:
    """Drafts the true next transition with a wrong token: never accepted."""

    def __init__(self, plain):
        self.steps = plain.steps

    def propose(self, request):
        truth = self.steps[request.step]
        wrong = type(truth)(truth.positions, tuple(t + 1 for t in truth.tokens))
        return DraftTree.chain([wrong])


def test_a_proposer_that_is_never_right_saves_nothing_and_logits_are_required():
    target = exact_target("llada")
    cfg = config(target, "top1", 0.0, (16, 8))
    plain = plain_decode(target, PROMPT, cfg, keep_logits=True)
    assert replay(plain, Off(plain), cfg, 4).metrics.nfe == plain.metrics.nfe
    assert replay(plain, build_proposer("oracle", target, plain), cfg, 4).metrics.nfe < plain.metrics.nfe
    with pytest.raises(ValueError, match="keep_logits"):
        replay(plain_decode(target, PROMPT, cfg), Off(plain), cfg, 4)
    assert torch.equal(plain.tokens, plain_decode(target, PROMPT, cfg).tokens)


class Elsewhere:
    """Drafts a masked position the target does not commit next: never accepted."""

    def __init__(self, plain):
        self.steps = plain.steps

    def propose(self, request):
        truth = self.steps[request.step].positions
        others = [
            p for p in range(request.root.numel()) if int(request.root[p]) == request.rule.mask_id and p not in truth
        ]
        return DraftTree.chain([Transition((others[0],), (0,))]) if others else DraftTree()


def test_replay_says_why_each_pass_stopped():
    target = exact_target("llada")
    cfg = config(target, "top1", 0.0, (16, 8))
    plain = plain_decode(target, PROMPT, cfg, keep_logits=True)
    for proposer, reason in (
        (Off(plain), TOKEN),
        (Elsewhere(plain), POSITION),
        (build_proposer("oracle", target, plain), LEAF),
    ):
        run = replay(plain, proposer, cfg, 4)
        assert len(run.stops) == len(run.pass_commits)
        assert reason in run.stops and set(run.stops) <= {reason, NO_DRAFT}, (type(proposer).__name__, run.stops)
    assert set(replay(plain, Off(plain), cfg, 0).stops) == {NO_DRAFT}

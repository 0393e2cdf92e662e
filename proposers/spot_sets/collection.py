"""Collecting SPOT-Sets' examples: plain *threshold* decoding of a target's prompts, reduced to what
the proposer may see, with the committed sets as labels.

As in `proposers.spot.collection`: a view is the logits of one plain pass (plus, on full-attention
targets, the block-start view a finished block's last pass gives the next block); its root is the
state one transition later; an example at depth d is the node d plain transitions below the root
(at most `max_depth` - 1, two masks left or more), with the candidate features at the noise of step
root + d. Labels are exact because plain decoding kept the target's logits at every node: the set the
target commits there, its argmax (the position the rule forces: the `top1` choice on the same logits
and noise), and per committed position whether the token is the stale candidate, the runner-up or
neither. Generation k decodes with seed `seed + k` wherever it runs, so the data does not depend on
where the chunks run. Prompts come from the caller (train splits, `spotbench train-proposer` and
`spotbench calibrate-spot-sets`); this module knows no task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from harness.decoding import DecodeConfig, NoiseSource, Rule, parse_rule, plain_decode
from harness.targets.target import DLMTarget
from proposers.spot.collection import CHUNK, ChunkMap, Job, cat_views, collect_in_chunks
from proposers.spot.features import NEITHER, RUNNER_UP, TOP, StaleView, candidates, root_ages, static_features
from proposers.spot_sets.tree import commit_set

NOT_COMMITTED = -1
"""`SetViews.token` at a position the step does not commit."""


class Collecting(Protocol):
    """What a collection needs from a recipe (`SpotSetsRecipe`, or the calibration's settings): read
    only, so frozen dataclasses and properties qualify."""

    @property
    def target(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def gen_length(self) -> int: ...
    @property
    def block_length(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def max_age(self) -> int: ...


@dataclass
class SetViews:
    """The stale views of one generation and the examples they yield (tensors, stackable)."""

    static: Tensor
    """[views, B, S]"""
    view: Tensor
    """[examples] the view each example reads."""
    candidate: Tensor
    """[examples, B, C] candidate features at the example's depth."""
    ages: Tensor
    """[examples, B] int8 commit ages at the example's node (MASKED where masked)."""
    depth: Tensor
    argmax: Tensor
    """[examples] the position the rule forces into the set."""
    in_set: Tensor
    """[examples, B] bool: the set the target commits at the node."""
    token: Tensor
    """[examples, B] int8: TOP / RUNNER_UP / NEITHER where committed, NOT_COMMITTED elsewhere."""
    temperature: float

    @staticmethod
    def cat(parts: list[SetViews]) -> dict[str, Tensor]:
        return cat_views(parts, ("static", "candidate", "ages", "depth", "argmax", "in_set", "token"))


def outcome(drafted_tokens: Tensor, runner_up: Tensor, position: int, token: int) -> int:
    return (
        TOP if int(drafted_tokens[position]) == token else RUNNER_UP if int(runner_up[position]) == token else NEITHER
    )


@torch.no_grad()
def collect(target: DLMTarget, prompt_ids: list[int], settings: Collecting, temperature: float, seed: int) -> SetViews:
    """Plain threshold decoding of one prompt, reduced to its SPOT-Sets examples."""
    rule = parse_rule(settings.rule, target.family, target.mask_id)
    top1 = Rule("top1", rule.mask_id, rule.confidence)
    size, mask_id = settings.block_length, target.mask_id
    plain = plain_decode(
        target, prompt_ids, DecodeConfig(rule, settings.gen_length, size, temperature, seed), keep_logits=True
    )
    noise = NoiseSource(seed, size, target.vocab_size) if temperature > 0 else None
    statics: list[Tensor] = []
    examples: dict[str, list] = {k: [] for k in ("view", "candidate", "ages", "depth", "argmax", "in_set", "token")}
    following, pass_logits = plain.following, plain.pass_logits
    assert following is not None and pass_logits is not None  # decoded with keep_logits
    for span in plain.blocks(mask_id):
        first, end = span.first, span.end
        states = span.states(plain.steps)  # states[k]: before step first + k
        previous = None if span.index == 0 else following[span.index - 1]
        views = [] if previous is None else [(previous, first)]
        views += [(pass_logits[step], step + 1) for step in range(first, end - 1)]
        for logits, root_step in views:
            root = states[root_step - first]
            if int((root == mask_id).sum()) < 2:
                continue
            stale = StaleView.of(logits, temperature, mask_id)
            statics.append(static_features(stale))
            history = tuple(p for t in plain.steps[first:root_step] for p in t.positions)
            ages = root_ages(root, mask_id, history, settings.max_age).tolist()
            drafted = None
            for depth in range(min(settings.max_depth, end - root_step)):
                step = root_step + depth
                state = states[step - first]
                if int((state == mask_id).sum()) < 2:
                    break
                if drafted is None or noise:
                    drafted = candidates(stale, noise(step) if noise else None, rule)
                transition = plain.steps[step]
                argmax = top1(pass_logits[step], state, noise(step) if noise else None, temperature)
                in_set = torch.zeros(size, dtype=torch.bool)
                in_set[list(transition.positions)] = True
                token = torch.full((size,), NOT_COMMITTED, dtype=torch.int8)
                for position, committed in zip(transition.positions, transition.tokens):
                    token[position] = outcome(drafted.tokens, drafted.runner_up, position, committed)
                for name, value in (
                    ("view", len(statics) - 1),
                    ("candidate", drafted.features),
                    ("ages", torch.tensor(ages, dtype=torch.int8)),
                    ("depth", depth),
                    ("argmax", argmax.positions[0]),
                    ("in_set", in_set),
                    ("token", token),
                ):
                    examples[name].append(value)
                ages = commit_set(ages, transition.positions)
    stack = {
        name: torch.stack(values) if name in ("candidate", "ages", "in_set", "token") else torch.tensor(values)
        for name, values in examples.items()
    }
    return SetViews(
        torch.stack(statics),
        stack["view"],
        stack["candidate"],
        stack["ages"],
        stack["depth"],
        stack["argmax"],
        stack["in_set"],
        stack["token"],
        temperature,
    )


def collect_jobs(settings: Collecting, target: DLMTarget, first: int, jobs: list[Job]) -> list[SetViews]:
    """Generations `first`, `first + 1`, ... of the jobs: generation k decodes with seed `settings.seed + k`."""
    return [
        collect(target, ids, settings, temperature, settings.seed + first + k)
        for k, (_, ids, temperature) in enumerate(jobs)
    ]


def collect_chunk(first: int, settings: Collecting, jobs: list[Job]) -> list[SetViews]:
    """One chunk, loading the target where it runs (a model does not travel as an argument)."""
    from harness.targets.registry import load_dlm_target

    return collect_jobs(
        settings, load_dlm_target(settings.target, what="SPOT-Sets"), first, jobs[first : first + CHUNK]
    )


def collect_all(
    settings: Collecting, target: DLMTarget, jobs: list[Job], map_chunks: ChunkMap | None = None
) -> tuple[list[SetViews], list[str]]:
    """Every generation of `jobs`, in job order, and their sources (`task/split/i@T=t`); chunks run
    here or through `map_chunks` (see `proposers.spot.collection.collect_all`)."""
    return collect_in_chunks(collect_jobs, collect_chunk, settings, target, jobs, map_chunks)

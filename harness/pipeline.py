"""The one arm pipeline: a prompt's plain reference once, then every arm beside it, one typed row each.

Every command that decodes (`run` on Ray workers, `decode`, `diagnose`) calls `decode_group`, so a
row means the same thing wherever it was made: the plain reference is decoded once per group (prompt,
temperature, rule, seed), every (proposer, budget) arm is decoded on the same process right after it
(so `speedup_wall` compares like with like), checked against it (`harness.lossless`) and scored.

The library stays below its callers: proposers are built by a function the caller passes (the
`proposers` registry), and scoring is a function of the completion text (a task's scorer), so this
module imports neither `proposers` nor `tasks`.

Autoregressive targets go through the same pipeline and row (`decoder` picks the loop by target
kind): their rows' rule is `greedy` (commit rules are a DLM notion), `nfe` counts target forwards,
`rows` the tokens scored, `commits` the tokens, so `mean_accept_len` is tokens per forward (docs/autoregressive.md).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.decoding import (
    DecodeConfig,
    Generation,
    Proposer,
    decode_batch,
    parse_rule,
    plain_generation,
    speculative_generation,
)
from harness.decoding.ar_rejection import (
    COUPLED,
    DISTRIBUTION,
    REJECTION,
    DistributionProposer,
    ar_rejection_generation,
)
from harness.decoding.autoregressive import AR_RULE, ARConfig, ARProposer, ar_generation, ar_plain_generation
from harness.decoding.batch import Decoding
from harness.decoding.tree import LEAF, NO_DRAFT, POSITION, TOKEN
from harness.lossless import batch_difference, check_lossless, record_drift
from harness.runs.schema import AUTO, Row
from harness.targets.ar import ARTarget
from harness.targets.target import DLMTarget


@dataclass(frozen=True)
class Arm:
    """One speculative arm: a proposer (`name[:argument]`, see `proposers.registry`) at a budget."""

    proposer: str
    budget: int
    kind: str = "baseline"
    """`oracle` (the true trajectory), `ceiling` (a diagnostic bound), `baseline` (training-free) or
    `learned`: the summary compares learned arms with the best baseline and every arm with the oracle."""
    trained_on: str | None = None
    """The target a learned proposer was trained on (its checkpoint's provenance): transfer studies."""
    chosen: int | None = None
    """For `budget == AUTO`: the budget this worker chose by measured latency (`harness.budget`)."""
    predicted_speedup_wall: float | None = None
    """... and the speedup_wall it predicted for it."""

    @property
    def decode_budget(self) -> int:
        if self.budget != AUTO:
            return self.budget
        if self.chosen is None:
            raise ValueError(f"arm {self.proposer}@auto has no chosen budget yet")
        return self.chosen


@dataclass(frozen=True)
class Group:
    """What one plain reference depends on: a prompt of a (model, task) at (temperature, rule, seed)."""

    model: str
    task: str
    sample_id: str
    prompt_ids: tuple[int, ...]
    temperature: float
    rule: str
    seed: int
    gen_length: int
    block_length: int
    prompt: str = ""
    """The prompt text behind `prompt_ids`, stored in every row."""
    reference: str | None = None
    """The gold answer (`tasks.base.Sample.reference`), stored in every row; None without a task."""
    chat_template: str = "none"
    """How `prompt` was rendered (`tasks.chat.Chat.label`), stored in every row."""
    block_length_trained: bool | None = None
    """Whether the target was trained at `block_length` (None: it records none), stored in every row."""


@dataclass(frozen=True)
class Score:
    correct: bool
    details: dict[str, Any]


ProposerBuilder = Callable[[str, DLMTarget | ARTarget, Generation], Proposer | ARProposer]
"""(proposer spec, target, plain generation of the same prompt and seed) -> a proposer for one generation."""
Scorer = Callable[[str], Score]
"""A completion's score against the sample's reference."""


def decode_group(
    target: DLMTarget | ARTarget,
    group: Group,
    arms: Sequence[Arm],
    build: ProposerBuilder,
    score: Scorer | None,
    exact_mode: bool,
    tolerance: float,
    worker: str = "",
    ar_sampling: str = COUPLED,
) -> list[Row]:
    """The rows of one group (`decode_groups` with one group, decoded alone)."""
    return decode_groups(target, [group], arms, build, [score], exact_mode, tolerance, worker, ar_sampling)[0]


def decode_groups(
    target: DLMTarget | ARTarget,
    groups: Sequence[Group],
    arms: Sequence[Arm],
    build: ProposerBuilder,
    scores: Sequence[Scorer | None],
    exact_mode: bool,
    tolerance: float,
    worker: str = "",
    ar_sampling: str = COUPLED,
    batch_size: int = 1,
    reference_checks: int = 1,
) -> list[list[Row]]:
    """The rows of each group: the plain references of all groups decoded `batch_size` at a time
    (`harness.decoding.batch.decode_batch`), then each arm over all groups likewise, each checked
    against its group's plain reference and scored (`scores[i]` scores group i). Each generation is
    its batch-1 decode (bit for bit in exactness mode); its wall time is its share of the batch's.
    AR arms in rejection mode at T>0 equal the plain reference in distribution only: their rows get
    the verdict `distribution`, `exact` None (at T=0 the mode is greedy and checked like any arm).

    A batched plain reference is checked too: `reference_checks` of the groups (`references_to_check`)
    are decoded again alone and compared with their batched reference (`check_reference`), since a
    defect of the padded path would corrupt reference and arm alike and their comparison would pass."""
    loops = [decoder(target, group, ar_sampling) for group in groups]
    plains = decode_batch(target, [loop(None, 0) for loop in loops], batch_size)
    checked_references = {
        i: check_reference(target, loops[i], plains[i], exact_mode, tolerance)
        for i in references_to_check(groups, batch_size, reference_checks)
    }
    completions = [decode_text(target, plain.answer_ids) for plain in plains]
    plain_scores = [score(c) if score else None for score, c in zip(scores, completions)]
    specs = [
        decode_batch(
            target,
            [loop(build(arm.proposer, target, plain), arm.decode_budget) for loop, plain in zip(loops, plains)],
            batch_size,
        )
        for arm in arms
    ]
    return [
        [
            row_of(
                group,
                arm,
                plain,
                arm_specs[i],
                completions[i],
                plain_scores[i],
                scores[i],
                target,
                exact_mode,
                tolerance,
                worker,
                ar_sampling,
                batch_size,
                checked_references.get(i),
            )
            for arm, arm_specs in zip(arms, specs)
        ]
        for i, (group, plain) in enumerate(zip(groups, plains))
    ]


def references_to_check(groups: Sequence[Group], batch_size: int, count: int) -> list[int]:
    """Which groups' batched plain references are decoded again alone: none when nothing was batched,
    else `count` of them, shortest prompt first (the most padding, where a masking defect shows), then
    the longest, alternating inwards."""
    if batch_size < 2 or len(groups) < 2:
        return []
    return ends_first(groups, count)


def ends_first(groups: Sequence[Group], count: int) -> list[int]:
    """`count` of the groups' indices: the shortest prompt, the longest, the second shortest, ..."""
    by_length = sorted(range(len(groups)), key=lambda i: (len(groups[i].prompt_ids), i))
    ends = [by_length[k // 2] if k % 2 == 0 else by_length[-1 - k // 2] for k in range(len(by_length))]
    return ends[:count]


def check_reference(
    target: DLMTarget | ARTarget,
    loop: Callable[[Any, int], Decoding],
    batched: Generation,
    exact_mode: bool,
    tolerance: float,
) -> str:
    """The verdict of a batched plain reference against its own decode alone: `exact`, `near-tie` (a
    float flip below the tolerance) or `logic-error`. In exactness mode any difference at all
    (`batch_difference`: trajectory, tokens, counts) is a logic error; otherwise so is a decision
    gap that moved by more than the tolerance (`record_drift`), which padding alone cannot do."""
    [alone] = decode_batch(target, [loop(None, 0)], 1)
    if exact_mode and batch_difference(batched, alone) is not None:
        return "logic-error"
    if record_drift(batched, alone) > tolerance:
        return "logic-error"
    return check_lossless(alone, batched, tolerance).verdict


def row_of(
    group: Group,
    arm: Arm,
    plain: Generation,
    spec: Generation,
    completion: str,
    plain_score: Score | None,
    score: Scorer | None,
    target: DLMTarget | ARTarget,
    exact_mode: bool,
    tolerance: float,
    worker: str,
    ar_sampling: str,
    batch_size: int,
    reference_check: str | None,
) -> Row:
    """One arm's row beside its group's plain reference: the lossless check, the scores, every metric."""
    checked = ar_sampling == COUPLED or group.temperature == 0
    report = check_lossless(plain, spec, tolerance)
    broken_reference = reference_check == "logic-error"  # nothing compared with it is known exact
    divergence = report.divergence if checked else None
    spec_completion = decode_text(target, spec.answer_ids)
    spec_score = plain_score if spec_completion == completion or not score else score(spec_completion)
    stops = Counter(spec.stops)
    return Row(
        model=group.model,
        proposer=arm.proposer,
        task=group.task,
        sample_id=group.sample_id,
        temperature=group.temperature,
        rule=group.rule,
        budget=arm.budget,
        seed=group.seed,
        batch_size=batch_size,
        proposer_kind=arm.kind,
        trained_on=arm.trained_on,
        chosen_budget=arm.decode_budget,
        predicted_speedup_wall=arm.predicted_speedup_wall,
        gen_length=group.gen_length,
        block_length=group.block_length,
        block_length_trained=group.block_length_trained,
        exact_mode=exact_mode,
        prompt_tokens=len(group.prompt_ids),
        prompt=group.prompt,
        chat_template=group.chat_template,
        reference=group.reference,
        **_metrics("plain", plain),
        stale_hit_rate=plain.metrics.stale_hit_rate,
        **_metrics("spec", spec),
        draft_nodes=spec.metrics.draft_nodes,
        mean_accept_len=spec.metrics.mean_accept_len,
        accepted_per_depth=list(spec.metrics.accepted_per_depth),
        stops_leaf=stops[LEAF],
        stops_position=stops[POSITION],
        stops_token=stops[TOKEN],
        stops_no_draft=stops[NO_DRAFT],
        spec_draft_model_forwards=spec.metrics.draft_model_forwards,
        ar_sampling=ar_sampling,
        speedup_nfe=plain.metrics.target_forwards / spec.metrics.target_forwards,
        speedup_wall=plain.metrics.wall_s / spec.metrics.wall_s if spec.metrics.wall_s else None,
        exact=False if broken_reference else report.exact if checked else None,
        verdict="logic-error" if broken_reference else report.verdict if checked else DISTRIBUTION,
        reference_check=reference_check,
        divergence_token=divergence.token if divergence else None,
        divergence_step=divergence.step if divergence else None,
        divergence_confidence_margin=divergence.confidence_margin if divergence else None,
        divergence_decision_gap=divergence.decision_gap if divergence else None,
        near_tie_tolerance=tolerance,
        completion=completion,
        correct=plain_score.correct if plain_score else None,
        score=json.dumps(plain_score.details, default=str) if plain_score else None,
        spec_completion=spec_completion,
        spec_correct=spec_score.correct if spec_score else None,
        plain_answer_ids=list(plain.answer_ids),
        spec_answer_ids=list(spec.answer_ids),
        worker=worker,
    )


def decoder(target: DLMTarget | ARTarget, group: Group, ar_sampling: str = COUPLED) -> Callable[[Any, int], Decoding]:
    """The group's loop as `loop(proposer, budget)`, for `decode_batch`; the proposer is a `Proposer`
    for a diffusion target, an `ARProposer` for an autoregressive one, and None for the traced plain
    reference. AR targets decode token by token and take only the rule `greedy`, coupled or by
    rejection sampling (`harness.decoding.ar_rejection`); DLMs block by block with the group's rule,
    coupled."""
    prompt = list(group.prompt_ids)
    if isinstance(target, ARTarget):
        if group.rule != AR_RULE:
            raise ValueError(f"an autoregressive target decodes with rule {AR_RULE!r}, not {group.rule!r}")
        ar_config = ARConfig(group.gen_length, group.temperature, group.seed)

        def loop_ar(proposer: ARProposer | None, budget: int) -> Decoding:
            if proposer is None:
                return ar_plain_generation(target, prompt, ar_config)
            if ar_sampling == REJECTION:
                if not isinstance(proposer, DistributionProposer):  # refused before a run (check_sampling)
                    raise ValueError(f"{type(proposer).__name__} gives no draft distributions for rejection mode")
                return ar_rejection_generation(target, prompt, proposer, ar_config, budget)
            return ar_generation(target, prompt, proposer, ar_config, budget)

        return loop_ar
    if ar_sampling != COUPLED:
        raise ValueError(f"a diffusion target decodes coupled, not with ar_sampling {ar_sampling!r}")
    config = decode_config(target, group)

    def loop_dlm(proposer: Proposer | None, budget: int) -> Decoding:
        if proposer is None:
            return plain_generation(target, prompt, config)
        return speculative_generation(target, prompt, proposer, config, budget)

    return loop_dlm


def decode_config(target: DLMTarget, group: Group) -> DecodeConfig:
    """The group's decoding settings on a diffusion target (its rule in the target's conventions)."""
    return DecodeConfig(
        parse_rule(group.rule, target.family, target.mask_id),
        group.gen_length,
        group.block_length,
        group.temperature,
        group.seed,
    )


def decode_text(target: DLMTarget | ARTarget, ids: list[int]) -> str:
    """The answer as text; a target without a tokenizer answers in token ids."""
    return target.tokenizer.decode(ids) if target.tokenizer is not None else " ".join(map(str, ids))


def _metrics(prefix: str, generation: Generation) -> dict[str, Any]:
    m = generation.metrics
    return {
        f"{prefix}_nfe": m.nfe,
        f"{prefix}_rows": m.rows,
        f"{prefix}_commits": m.commits,
        f"{prefix}_tokens": len(generation.answer_ids),
        f"{prefix}_wall_s": m.wall_s,
        f"{prefix}_target_s": m.target_s,
        f"{prefix}_proposer_s": m.proposer_s,
        f"{prefix}_other_s": m.other_s,
        f"{prefix}_target_forwards": m.target_forwards,
    }

"""Passes-only runs: every arm's pass counts replayed from one plain decode per prompt, a sample of
prompts decoded for real beside them.

Why: a pass table over many proposers, budgets, rules, temperatures and seeds costs one speculative
decode per arm and prompt; on a CPU with a real target that is hours. A draft is only entered where
it equals the target's own transition, so an arm's passes follow from the plain trajectory and its
logits alone (`harness.decoding.replay`): one plain decode per prompt with its logits kept, and
every arm is replayed from it in a fraction of the time a decode takes.

What a row of such a run says (`harness.runs.schema.Row`):

- the groups of the sample (`replay_checks` per call, shortest and longest prompt first:
  `harness.pipeline.ends_first`) are decoded for real through `decode_groups`, so their rows are
  ordinary rows (wall time, exactness, scores) that also carry the replayed count (`replay_nfe`) and
  the replay's own time (`replay_s`). In exactness mode a replayed count that differs from the
  decoded one is a logic error (the row's verdict; exact_rate and the gate fail on it); otherwise
  it is counted (`replay_mismatches` in the summary): a float near-tie that the plain reference
  with kept logits, decoded in another batch, resolved otherwise than the decoded arm's;
- every other row is `replayed`: its pass counts are the replay's, it carries no wall time (zeros;
  the summary's wall figures read the sample only), its exactness is not checked (`exact` None,
  verdict `replayed`: it is the plain trajectory by construction) and its completion and score are
  the plain reference's, which speculative decoding reproduces (lossless): its accuracy is plain's.

Replay stands only for diffusion targets' coupled verification: an autoregressive target's arms
(Psi-Spec, draft models, prompt lookup, rejection sampling) draft or sample on the target itself, so
`check_passes_only` refuses them before a run starts.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from harness.decoding import Generation, decode_batch, plain_generation
from harness.decoding.ar_rejection import COUPLED
from harness.decoding.replay import replay
from harness.errors import UserError
from harness.pipeline import (
    Arm,
    Group,
    ProposerBuilder,
    Scorer,
    decode_config,
    decode_groups,
    decode_text,
    ends_first,
    row_of,
)
from harness.runs.schema import Row
from harness.targets.ar import ARTarget, is_ar_name
from harness.targets.target import DLMTarget

REPLAYED = "replayed"
"""The verdict of a replayed row: not decoded, so not token-checked."""
UNIT_PROMPTS = 32
"""Prompts per worker unit of a passes-only run at least: its sample is drawn per unit, so larger
units decode fewer prompts for real."""


def check_passes_only(models: Sequence[str], flag: str = "--passes-only") -> None:
    """UserError when replay cannot stand for an arm of the run: autoregressive targets."""
    for model in models:
        if is_ar_name(model):
            raise UserError(
                f"{flag} replays diffusion targets only and {model} is autoregressive (its arms draft or "
                f"sample on the target itself, which replay cannot stand for); run it without {flag}"
            )


def replay_groups(
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
    replay_checks: int = 4,
) -> list[list[Row]]:
    """`harness.pipeline.decode_groups`'s rows, each arm's passes replayed from the group's plain
    reference except on `replay_checks` groups, which are decoded for real and checked against it."""
    if isinstance(target, ARTarget) or ar_sampling != COUPLED:  # refused before a run (check_passes_only)
        raise ValueError("a passes-only run replays coupled diffusion decoding only")
    configs = [decode_config(target, group) for group in groups]
    plains = decode_batch(
        target,
        [plain_generation(target, list(g.prompt_ids), c, keep_logits=True) for g, c in zip(groups, configs)],
        batch_size,
    )
    sample = sorted(ends_first(groups, replay_checks))
    decoded = decode_groups(
        target,
        [groups[i] for i in sample],
        arms,
        build,
        [scores[i] for i in sample],
        exact_mode,
        tolerance,
        worker,
        COUPLED,
        batch_size,
        reference_checks,
    )
    real = dict(zip(sample, decoded))
    out = []
    for i, (group, plain, config) in enumerate(zip(groups, plains, configs)):
        completion, score = decode_text(target, plain.answer_ids), scores[i]
        plain_score = score(completion) if score is not None and i not in real else None
        rows = []
        for a, arm in enumerate(arms):
            started = time.perf_counter()
            spec = replay(plain, build(arm.proposer, target, plain), config, arm.decode_budget)  # type: ignore[arg-type]
            seconds = time.perf_counter() - started
            if i in real:
                rows.append(checked_row(real[i][a], plain, spec, seconds, exact_mode))
                continue
            row = row_of(
                group,
                arm,
                plain,
                spec,
                completion,
                plain_score,
                score,
                target,
                exact_mode,
                tolerance,
                worker,
                COUPLED,
                batch_size,
                None,
            )
            rows.append(replayed_row(row, spec, seconds))
        out.append(rows)
    return out


def replayed_row(row: Row, spec: Generation, seconds: float) -> Row:
    """A row of replayed passes: no wall time of its own, no exactness check (the plain trajectory)."""
    return dataclasses.replace(
        row,
        plain_wall_s=0.0,
        plain_target_s=0.0,
        plain_proposer_s=0.0,
        plain_other_s=0.0,
        spec_wall_s=0.0,
        spec_target_s=0.0,
        spec_proposer_s=0.0,
        spec_other_s=0.0,
        speedup_wall=None,
        exact=None,
        verdict=REPLAYED,
        divergence_token=None,
        divergence_step=None,
        divergence_confidence_margin=None,
        divergence_decision_gap=None,
        replayed=True,
        replay_nfe=spec.metrics.target_forwards,
        replay_s=seconds,
    )


def checked_row(row: Row, plain: Generation, spec: Generation, seconds: float, exact_mode: bool) -> Row:
    """A really decoded row with the replayed count beside the decoded one. In exactness mode a
    difference (the arm's passes, or the kept-logits plain reference's against the decoded one) is a
    logic error: replay and decoding compute the same passes from the same logits."""
    differs = (spec.metrics.target_forwards, plain.metrics.target_forwards) != (
        row.spec_target_forwards,
        row.plain_target_forwards,
    )
    exact, verdict = (False, "logic-error") if exact_mode and differs else (row.exact, row.verdict)
    return dataclasses.replace(
        row, replay_nfe=spec.metrics.target_forwards, replay_s=seconds, exact=exact, verdict=verdict
    )


def replay_statement(summary: Sequence[dict], exact_mode: bool) -> str:
    """What a passes-only run's summary says of its replay: how many replayed pass counts equal the
    decoded ones on the sample, and what the replays cost against the decodes they stand for."""
    replayed = sum(r["replayed_rows"] for r in summary)
    checked = sum(r["replay_checked"] for r in summary)
    differ = sum(r["replay_mismatches"] for r in summary)
    costs = [r["replay_cost"] for r in summary if r["replay_cost"] is not None]
    why = "logic errors (exactness mode)" if exact_mode else "float near-ties of the kept-logits reference"
    cost = f"{max(costs):.1%} at most, {sum(costs) / len(costs):.1%} on average" if costs else "unmeasured"
    return (
        f"replay: {replayed} rows replayed; on the really decoded sample {checked - differ} of {checked} "
        f"replayed pass counts equal the decoded ones ({differ} differ{': ' + why if differ else ''}); an "
        f"arm's replay costs {cost} of the decode it stands for (floor <= 5%); wall figures are the sample's"
    )

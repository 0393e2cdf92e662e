"""The versioned results schema of a run directory: one row per arm, its key and the file names.

Shared by the writer and reader of run directories (`harness.runs.run_dir`), their integrity checks
(`harness.runs.verify`) and the summary (`harness.runs.summary`). Changing
a column, a key or a file name means a new `SCHEMA_VERSION`; directories of another version are
refused rather than mixed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

SCHEMA_VERSION = 10
AUTO = -1
"""The budget of an `auto` arm in rows and summaries: each worker chooses the budget itself
(`chosen_budget` says which)."""
KEY_FIELDS = ("model", "proposer", "task", "sample_id", "temperature", "rule", "budget", "seed", "batch_size")
GROUP_FIELDS = ("model", "task", "sample_id", "temperature", "rule", "seed", "batch_size")
STATUSES = ("running", "complete", "failed")
SUMMARY_METADATA = b"spotbench_run"


@dataclass(frozen=True)
class Row:
    """One arm of one group: the Parquet row (one per (model, proposer, task, sample, temperature,
    rule, budget, seed, batch size)). `harness.pipeline.decode_groups` is the only maker of rows."""

    # key
    model: str
    proposer: str
    task: str
    sample_id: str
    temperature: float
    rule: str
    budget: int
    seed: int = dataclasses.field(metadata={"arrow": pa.uint64()})
    """Any seed in [0, 2**64), as the noise takes it."""
    batch_size: int
    """The most generations the worker decoded together (`decode_batch`), for the plain reference and
    for the arm alike: the generation's tokens and passes are its batch-1 ones, its wall time its
    share of the batch's (docs/runs.md)."""
    # the arm
    proposer_kind: str
    trained_on: str | None
    chosen_budget: int
    """The budget decoded with: `budget` itself, or for an `auto` arm (budget -1) the worker's choice."""
    predicted_speedup_wall: float | None
    """An `auto` arm's speedup_wall as its worker predicted it when choosing (`harness.budget`)."""
    ar_sampling: str
    """`coupled` (token-exact; every DLM arm) or `rejection` (AR rejection sampling,
    `harness.decoding.ar_rejection`): the run's `--ar-sampling`."""
    # decoding settings shared by every row of a run
    gen_length: int
    block_length: int
    block_length_trained: bool | None
    """False: decoded at a block length the target was not trained at (`--untrained-block-length`);
    None: the target records no trained block length (`harness.targets.registry.trained_block_lengths`)."""
    exact_mode: bool
    prompt_tokens: int
    # the sample, so a row can be checked and re-scored without the task's data
    prompt: str
    """The prompt text the target read (after any template)."""
    chat_template: str
    """How the prompt was rendered (`tasks.chat.Chat.label`): none, off or template:<sha256 prefix>."""
    reference: str | None
    """The gold answer scoring compares against (`tasks.base.Sample.reference`)."""
    # plain reference (computed once per group, repeated in each of its arms)
    plain_nfe: int
    plain_rows: int
    plain_commits: int
    plain_tokens: int
    plain_wall_s: float
    plain_target_s: float
    plain_proposer_s: float
    plain_other_s: float
    plain_target_forwards: int
    stale_hit_rate: float | None
    # speculative arm
    spec_nfe: int
    spec_rows: int
    spec_commits: int
    spec_tokens: int
    spec_wall_s: float
    spec_target_s: float
    spec_proposer_s: float
    spec_other_s: float
    spec_target_forwards: int
    """Forwards of the target's network: verify passes (`spec_nfe`) plus the proposer's draft forwards on
    it (Psi-Spec); `speedup_nfe` is plain_target_forwards / spec_target_forwards."""
    spec_draft_model_forwards: int
    """Forwards of a separate draft model (`draft-model:NAME`), not counted as target forwards."""
    draft_nodes: int
    mean_accept_len: float
    accepted_per_depth: list[int]
    stops_leaf: int
    """Passes whose walk stopped at a node with no children (see `harness.decoding.tree.stop_reason`)."""
    stops_position: int
    stops_token: int
    stops_no_draft: int
    speedup_nfe: float
    speedup_wall: float | None
    # lossless check
    exact: bool | None
    """None when the row is not token-checked (verdict `distribution`: rejection sampling at T>0)."""
    verdict: str
    divergence_token: int | None
    divergence_step: int | None
    divergence_confidence_margin: float | None
    divergence_decision_gap: float | None
    near_tie_tolerance: float
    reference_check: str | None
    """The group's batched plain reference decoded again alone and compared (`exact`, `near-tie` or
    `logic-error`, which makes the row's verdict `logic-error`); None where it was not (batch 1, or
    not among the unit's sampled groups: `harness.pipeline.references_to_check`)."""
    # task score (plain completion; the spec one differs only when the arms diverge)
    completion: str
    correct: bool | None
    score: str | None
    spec_completion: str
    spec_correct: bool | None
    plain_answer_ids: list[int]
    """The generated token ids of the plain reference, up to EOS (what `completion` decodes)."""
    spec_answer_ids: list[int]
    # provenance
    worker: str
    # passes-only runs (`harness.passes_only`)
    replayed: bool = False
    """The arm's passes were replayed from the plain reference's trajectory (`harness.decoding.replay`),
    not decoded: the row's pass counts are real, its wall columns 0 (no time of its own), its exactness
    unchecked (`exact` None, verdict `replayed`) and its spec completion and score the plain reference's."""
    replay_nfe: int | None = None
    """Target forwards the replay gave: on a replayed row its spec_target_forwards; on a really decoded
    row of a passes-only run's sample, the count checked against the decoded one; None outside such runs."""
    replay_s: float | None = None
    """Seconds the replay of this arm took (proposer and recorded logits; no target pass)."""


_ARROW = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    list[int]: pa.list_(pa.int64()),
    list[float]: pa.list_(pa.float64()),
}


def arrow_schema(row_type: type) -> pa.Schema:
    """The Arrow schema of a row dataclass: one nullable column per field, in field order."""
    hints = typing.get_type_hints(row_type)
    columns = []
    for f in dataclasses.fields(row_type):
        kind = hints[f.name]
        if isinstance(kind, types.UnionType):  # `X | None`
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        columns.append((f.name, f.metadata.get("arrow", _ARROW[kind])))
    return pa.schema(columns, metadata={"spotbench_schema_version": str(SCHEMA_VERSION)})


ROW_SCHEMA = arrow_schema(Row)


def group_id(group: dict[str, Any]) -> str:
    """Deterministic stem of a group's files: a hash of its key, the same on every machine."""
    key = json.dumps([group[f] for f in GROUP_FIELDS], separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def part_name(group: str, arms: list[tuple[str, int]]) -> str:
    """File name of a group's rows for a set of arms: the group id, then a hash of the sorted arms
    (a run extended with new arms writes them beside the group's first file, never over it)."""
    key = json.dumps(sorted([p, b] for p, b in arms), separators=(",", ":"))
    return f"{group}-{hashlib.sha256(key.encode()).hexdigest()[:8]}.parquet"


def group_label(row: dict[str, Any]) -> str:
    """A group as people name it, for messages: `model/task/sample T=.. rule seed ..`."""
    return (
        f"{row['model']}/{row['task']}/{row['sample_id']} T={row['temperature']:g} {row['rule']} "
        f"seed {row['seed']} batch {row['batch_size']}"
    )

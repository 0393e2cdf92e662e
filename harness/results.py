"""Run directories: the versioned results schema, checked per-sample files, the summary, the manifest.

A run directory (DESIGN.md section 5) holds

- `manifest.json`: schema version, status (`running`, `complete`, `failed`), the config that defines
  the results and how it grew, the command lines, git revision, package versions, hardware, seeds,
  sha256 of the checkpoints and data files read, and one record per session (durations, worker
  deaths, retries, damaged files recomputed);
- `samples/<group id>-<arms id>.parquet`: one file per *group* = (model, task, sample_id,
  temperature, rule, seed) and set of (proposer, budget) arms, one row per arm. A group is the unit
  of work because its plain reference is decoded once and shared by its arms (and `speedup_wall`
  compares arms timed on the same worker); a run extended with more proposers or budgets adds a
  second file for the new arms of each finished group instead of decoding the group again. Files
  are written with Parquet page checksums to a temporary name and renamed (atomic on POSIX), never
  rewritten, and listed with their sha256 in `index.jsonl` (`harness.store`, which also verifies);
- `summary.parquet`: one row per (model, proposer, task, temperature, rule, budget), over samples
  and seeds (`harness.summary`), written when the run completes, with the run's config and status
  in its Parquet metadata so a summary copied on its own still says what it summarizes.

Re-opening a directory resumes it, or extends it when the config only grows (`harness.configs`);
any other config, another schema version or other checkpoint/data bytes are refused, because rows of
two configs must never be mixed. Settings that do not change results (workers, Ray address) are not
part of the config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import subprocess
import time
import types
import typing
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness import configs, store
from harness.errors import UserError

SCHEMA_VERSION = 6
AUTO = -1
"""The budget of an `auto` arm in rows and summaries: each worker chooses the budget itself
(`chosen_budget` says which)."""
KEY_FIELDS = ("model", "proposer", "task", "sample_id", "temperature", "rule", "budget", "seed")
GROUP_FIELDS = ("model", "task", "sample_id", "temperature", "rule", "seed")
STATUSES = ("running", "complete", "failed")
SUMMARY_METADATA = b"spotbench_run"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Row:
    """One arm of one group: the Parquet row (one per (model, proposer, task, sample, temperature,
    rule, budget, seed)). `harness.pipeline.evaluate_group` is the only maker of rows."""

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


_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_(),
          list[int]: pa.list_(pa.int64()), list[float]: pa.list_(pa.float64())}


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
    return (f"{row['model']}/{row['task']}/{row['sample_id']} T={row['temperature']:g} {row['rule']} "
            f"seed {row['seed']}")


@dataclass
class RunDir:
    path: Path

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def samples_dir(self) -> Path:
        return self.path / "samples"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.parquet"

    @classmethod
    def existing(cls, path: str | Path) -> RunDir:
        """A run directory written by this schema version, for commands that read one (UserError if not)."""
        run = cls(Path(path))
        if not run.manifest_path.is_file():
            raise UserError(f"{path} is not a run directory (no manifest.json)")
        version = run.manifest().get("schema_version")
        if version != SCHEMA_VERSION:
            raise UserError(f"{path} holds results of schema version {version}; this spotbench reads version "
                            f"{SCHEMA_VERSION}: run it again with this version")
        return run

    @classmethod
    def check(cls, path: str | Path, config: dict[str, Any], inputs: dict[str, Any] | None = None) -> RunDir:
        """Refuse (UserError) a directory that `open` would refuse, without writing anything."""
        run = cls(Path(path))
        if run.manifest_path.exists():
            manifest = run.manifest()
            if manifest.get("schema_version") != SCHEMA_VERSION:
                raise UserError(f"{path} holds results of schema version {manifest.get('schema_version')}, "
                                f"this spotbench writes version {SCHEMA_VERSION}; use a new output directory")
            refused = configs.compare(manifest.get("config", {}), config).refused
            if refused:
                raise UserError(
                    f"{path} holds a run of a different config ({configs.describe(refused)}); a run directory "
                    "only grows (more items in list settings, a larger --limit): resume with the same settings, "
                    "extend them, or use a new output directory")
            changed = configs.input_differences(inputs or {}, manifest.get("inputs", {}))
            if changed:
                raise UserError(f"{path} was run with other bytes of the same inputs ({', '.join(changed)}); rows "
                                "of both would mix: restore them or use a new output directory")
        elif run.path.exists() and (not run.path.is_dir() or any(run.path.iterdir())):
            raise UserError(f"{path} is not empty and is not a spotbench run directory; choose another")
        return run

    @classmethod
    def open(cls, path: str | Path, config: dict[str, Any], seeds: list[int], hardware: dict[str, Any] | None = None,
             inputs: dict[str, Any] | None = None, command: list[str] | None = None,
             verification: store.Verification | None = None) -> RunDir:
        """Create the run directory, or resume (or extend) the run it holds: damaged sample files
        (`verification`, else verified here) move to `damaged/` so their groups are decoded again."""
        run = cls.check(path, config, inputs)
        session = {"started": _now(), "command": command}
        if run.manifest_path.exists():
            manifest = run.manifest()
            extended = configs.compare(manifest["config"], config).extended
            damage = (verification or run.verify()).damage
            store.quarantine(run, damage)
            history = manifest.get("config_history", [])
            if extended:
                history.append({"at": _now(), "changes": {k: list(v) for k, v in extended.items()}})
            for stale in (run.summary_path, run.path / "report.html"):  # they describe the run before this one
                stale.unlink(missing_ok=True)
            manifest = {k: v for k, v in manifest.items() if k not in ("summary_sha256", "groups", "rows")}
            previous = manifest.get("inputs", {})
            run._write_manifest(manifest | {
                "status": "running", "updated": _now(), "config": config, "seeds": seeds, "config_history": history,
                "inputs": {kind: previous.get(kind, {}) | (inputs or {}).get(kind, {}) for kind in ("checkpoints", "data")},
                "sessions": manifest.get("sessions", []) + [session | {
                    "resumed": True, "extended": {k: list(v) for k, v in extended.items()},
                    "damaged": [d.line() for d in damage]}]})
        else:
            run._write_manifest({
                "schema_version": SCHEMA_VERSION, "status": "running", "created": _now(), "updated": _now(),
                "config": config, "config_history": [], "seeds": seeds, "command": command,
                "git_revision": git_revision(), "packages": package_versions(), "hardware": hardware or {},
                "inputs": {"checkpoints": {}, "data": {}} | (inputs or {}), "sessions": [session | {"resumed": False}],
            })
        run.samples_dir.mkdir(exist_ok=True)
        for stale in run.path.rglob(".tmp-*"):  # left by a killed driver; never read
            stale.unlink()
        return run

    def manifest(self) -> dict[str, Any]:
        try:
            return json.loads(self.manifest_path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise UserError(f"cannot read {self.manifest_path}: {error}") from None

    def update_manifest(self, **fields: Any) -> None:
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"unknown status {fields['status']!r}")
        self._write_manifest(self.manifest() | fields | {"updated": _now()})

    def end_session(self, status: str, error: str | None = None, **stats: Any) -> None:
        """Close this invocation's session record (duration, deaths, retries...) and set the status
        (and the error that stopped it, if any) for the run."""
        sessions = self.manifest().get("sessions") or [{}]
        sessions[-1] |= stats | {"finished": _now(), "status": status, "error": error}
        self.update_manifest(status=status, error=error, sessions=sessions, resumes=len(sessions) - 1)

    def verify(self) -> store.Verification:
        return store.verify(self)

    def write_group(self, rows: list[Row]) -> bool:
        """Write one group's rows (one per arm) atomically and index them; False (and nothing
        written) if a file of that group and those arms is already there."""
        records = [dataclasses.asdict(r) for r in rows]
        ids = {group_id(r) for r in records}
        if len(ids) != 1:
            raise ValueError(f"rows of {len(ids)} groups given; write one group at a time")
        arms = sorted({(r["proposer"], r["budget"]) for r in records})
        if len(arms) != len(records):
            raise ValueError("an arm appears twice in one group's rows")
        group = ids.pop()
        final = self.samples_dir / part_name(group, arms)
        if final.exists():
            return False
        digest = store.write_parquet(pa.Table.from_pylist(records, schema=ROW_SCHEMA), final)
        store.append_index(self, {"file": final.name, "group": group, "label": group_label(records[0]),
                                  "arms": [list(a) for a in arms], "rows": len(records), "sha256": digest,
                                  "written": _now()})
        return True

    def read_rows(self) -> pa.Table:
        """Every row of the run, each once; UserError naming the damage if any file fails `verify`."""
        verification = self.verify()
        if verification.damage:
            raise UserError(store.damage_message(self, verification.damage))
        return verification.rows(ROW_SCHEMA)

    def write_summary(self) -> pa.Table:
        """Summarize the verified rows into summary.parquet, with the run's config in its metadata,
        and record its sha256 and the run's size (groups, rows) in the manifest."""
        from harness.summary import summarize

        rows = self.read_rows()
        manifest = self.manifest()
        provenance = {"schema_version": SCHEMA_VERSION, "status": "complete", "run": str(self.path),
                      **{k: manifest.get(k) for k in ("config", "seeds", "inputs", "git_revision")}}
        table = summarize(rows)
        table = table.replace_schema_metadata((table.schema.metadata or {}) | {
            SUMMARY_METADATA: json.dumps(provenance, sort_keys=True).encode()})
        digest = store.write_parquet(table, self.summary_path)
        groups = len({group_id(r) for r in rows.select(list(GROUP_FIELDS)).to_pylist()})
        self.update_manifest(summary_sha256=digest, groups=groups, rows=rows.num_rows)
        return table

    def read_summary(self) -> pa.Table:
        if not self.summary_path.exists():
            raise UserError(f"{self.path} has no summary.parquet (the run has not completed)")
        return store.read_parquet(self.summary_path)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        temp = self.path / ".tmp-manifest.json"
        temp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        os.replace(temp, self.manifest_path)


def git_revision() -> str | None:
    """HEAD of the checkout spotbench runs from, `+dirty` when it has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("spotbench", "torch", "ray", "pyarrow", "transformers", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")

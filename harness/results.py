"""Run directories: the versioned results schema, atomic per-sample files, the summary, the manifest.

A run directory (DESIGN.md section 5) holds

- `manifest.json`: schema version, status (`running`, `complete`, `failed`), the config that defines
  the results, git revision, package versions, hardware and seeds;
- `samples/<group id>.parquet`: one file per *group* = (model, task, sample_id, temperature, rule,
  seed), holding one row per (proposer, budget) arm of that group. A group is the unit of work and
  of writing because its plain reference is computed once and shared by all of its arms, and so that
  `speedup_wall` compares arms timed on the same worker. The name is a hash of the group key, the
  file is written to a temporary name and renamed (atomic on POSIX), and an existing file is never
  rewritten: a resumed run or a retried shard can skip it, so no row is ever written twice;
- `summary.parquet`: one row per (model, proposer, task, temperature, rule, budget), over samples
  and seeds, written when the run completes (`harness.summary`).

Re-opening a directory with the same config resumes it; a different config (or schema version) is
refused, because rows of two configs must never be mixed. Settings that do not change results
(workers, Ray address) are not part of the config.
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
import pyarrow.parquet as pq

from harness.errors import UserError

SCHEMA_VERSION = 3
KEY_FIELDS = ("model", "proposer", "task", "sample_id", "temperature", "rule", "budget", "seed")
GROUP_FIELDS = ("model", "task", "sample_id", "temperature", "rule", "seed")
STATUSES = ("running", "complete", "failed")
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
    seed: int
    # the arm
    proposer_kind: str
    trained_on: str | None
    # decoding settings shared by every row of a run
    gen_length: int
    block_length: int
    exact_mode: bool
    prompt_tokens: int
    # plain reference (computed once per group, repeated in each of its arms)
    plain_nfe: int
    plain_rows: int
    plain_commits: int
    plain_tokens: int
    plain_wall_s: float
    plain_target_s: float
    plain_proposer_s: float
    plain_other_s: float
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
    exact: bool
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
        columns.append((f.name, _ARROW[kind]))
    return pa.schema(columns, metadata={"spotbench_schema_version": str(SCHEMA_VERSION)})


ROW_SCHEMA = arrow_schema(Row)


def group_id(group: dict[str, Any]) -> str:
    """Deterministic file stem of a group: a hash of its key, the same on every machine."""
    key = json.dumps([group[f] for f in GROUP_FIELDS], separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def row_key(row: dict[str, Any]) -> tuple:
    return tuple(row[f] for f in KEY_FIELDS)


@dataclass
class RunDir:
    path: Path

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def samples_dir(self) -> Path:
        return self.path / "samples"

    @classmethod
    def open(cls, path: str | Path, config: dict[str, Any], seeds: list[int],
             hardware: dict[str, Any] | None = None) -> RunDir:
        """Create the run directory, or resume it when it holds a run of the same config."""
        run = cls.check(path, config)
        if run.manifest_path.exists():
            run._write_manifest(run.manifest() | {"status": "running", "updated": _now()})
        else:
            run.samples_dir.mkdir(parents=True, exist_ok=True)
            run._write_manifest({
                "schema_version": SCHEMA_VERSION, "status": "running", "created": _now(),
                "updated": _now(), "config": config, "seeds": seeds, "git_revision": git_revision(),
                "packages": package_versions(), "hardware": hardware or {},
            })
        run.samples_dir.mkdir(exist_ok=True)
        for stale in run.path.rglob(".tmp-*"):  # left by a killed driver; never read
            stale.unlink()
        return run

    @classmethod
    def check(cls, path: str | Path, config: dict[str, Any]) -> RunDir:
        """Refuse (UserError) a directory that `open` would refuse, without writing anything."""
        run = cls(Path(path))
        if run.manifest_path.exists():
            manifest = run.manifest()
            if manifest.get("schema_version") != SCHEMA_VERSION:
                raise UserError(f"{path} holds results of schema version {manifest.get('schema_version')}, "
                                f"this spotbench writes version {SCHEMA_VERSION}; use a new output directory")
            if manifest.get("config") != config:
                changed = sorted(k for k in config.keys() | manifest.get("config", {}).keys()
                                 if config.get(k) != manifest.get("config", {}).get(k))
                raise UserError(f"{path} holds a run of a different config (differs in: {', '.join(changed)}); "
                                "use a new output directory or the same settings to resume")
        elif run.path.exists() and (not run.path.is_dir() or any(run.path.iterdir())):
            raise UserError(f"{path} is not empty and is not a spotbench run directory; choose another")
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

    def done_groups(self) -> set[str]:
        return {p.stem for p in self.samples_dir.glob("*.parquet")}

    def write_group(self, rows: list[Row]) -> bool:
        """Write one group's rows atomically; False (and nothing written) if the group is done."""
        records = [dataclasses.asdict(r) for r in rows]
        ids = {group_id(r) for r in records}
        if len(ids) != 1:
            raise ValueError(f"rows of {len(ids)} groups given; write one group at a time")
        final = self.samples_dir / f"{ids.pop()}.parquet"
        if final.exists():
            return False
        table = pa.Table.from_pylist(records, schema=ROW_SCHEMA)
        temp = final.with_name(f".tmp-{final.stem}-{os.getpid()}")
        pq.write_table(table, temp)
        os.replace(temp, final)
        return True

    def read_rows(self) -> pa.Table:
        files = sorted(self.samples_dir.glob("*.parquet"))
        if not files:
            return ROW_SCHEMA.empty_table()
        return pa.concat_tables([pq.read_table(f, schema=ROW_SCHEMA) for f in files])

    def write_summary(self) -> pa.Table:
        from harness.summary import summarize

        table = summarize(self.read_rows())
        temp = self.path / ".tmp-summary.parquet"
        pq.write_table(table, temp)
        os.replace(temp, self.path / "summary.parquet")
        return table

    def read_summary(self) -> pa.Table:
        path = self.path / "summary.parquet"
        if not path.exists():
            raise UserError(f"{self.path} has no summary.parquet (the run has not completed)")
        return pq.read_table(path)

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

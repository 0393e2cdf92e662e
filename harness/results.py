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
  and seeds, written when the run completes.

Re-opening a directory with the same config resumes it; a different config (or schema version) is
refused, because rows of two configs must never be mixed. Settings that do not change results
(workers, Ray address) are not part of the config.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.bootstrap import interval, resampled_speedups
from harness.errors import UserError

SCHEMA_VERSION = 2
KEY_FIELDS = ("model", "proposer", "task", "sample_id", "temperature", "rule", "budget", "seed")
GROUP_FIELDS = ("model", "task", "sample_id", "temperature", "rule", "seed")
STATUSES = ("running", "complete", "failed")
PROJECT_ROOT = Path(__file__).resolve().parents[1]

_I, _F, _S, _B = pa.int64(), pa.float64(), pa.string(), pa.bool_()
ROW_SCHEMA = pa.schema(
    [
        # key
        ("model", _S), ("proposer", _S), ("task", _S), ("sample_id", _S), ("temperature", _F),
        ("rule", _S), ("budget", _I), ("seed", _I),
        # decoding settings shared by every row of a run
        ("gen_length", _I), ("block_length", _I), ("exact_mode", _B),
        # plain reference (computed once per group, repeated in each of its arms)
        ("plain_nfe", _I), ("plain_rows", _I), ("plain_commits", _I), ("plain_tokens", _I),
        ("plain_wall_s", _F), ("plain_target_s", _F), ("plain_proposer_s", _F), ("plain_other_s", _F),
        ("stale_hit_rate", _F),
        # speculative arm
        ("spec_nfe", _I), ("spec_rows", _I), ("spec_commits", _I), ("spec_tokens", _I),
        ("draft_nodes", _I), ("mean_accept_len", _F), ("accepted_per_depth", pa.list_(_I)),
        ("spec_wall_s", _F), ("spec_target_s", _F), ("spec_proposer_s", _F), ("spec_other_s", _F),
        ("speedup_nfe", _F), ("speedup_wall", _F),
        # lossless check
        ("exact", _B), ("verdict", _S), ("divergence_token", _I), ("divergence_step", _I),
        ("divergence_confidence_margin", _F), ("divergence_decision_gap", _F),
        ("near_tie_tolerance", _F),
        # task score (plain completion; the spec one differs only when the arms diverge)
        ("completion", _S), ("correct", _B), ("score", _S), ("spec_completion", _S),
        ("spec_correct", _B),
        # provenance
        ("worker", _S),
    ],
    metadata={"spotbench_schema_version": str(SCHEMA_VERSION)},
)

SUMMARY_SCHEMA = pa.schema(
    [
        ("model", _S), ("proposer", _S), ("task", _S), ("temperature", _F), ("rule", _S),
        ("budget", _I), ("n", _I), ("exact_rate", _F), ("lossless_rate", _F), ("speedup_nfe", _F),
        ("speedup_nfe_ci95", pa.list_(_F)), ("speedup_wall", _F), ("mean_accept_len", _F), ("accuracy", _F),
        ("correct", _I), ("spec_accuracy", _F), ("plain_nfe_per_token", _F), ("spec_nfe_per_token", _F),
        ("stale_hit_rate", _F),
    ],
    metadata={"spotbench_schema_version": str(SCHEMA_VERSION)},
)
SUMMARY_KEY = ("model", "proposer", "task", "temperature", "rule", "budget")


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

    def write_group(self, rows: list[dict[str, Any]]) -> bool:
        """Write one group's rows atomically; False (and nothing written) if the group is done."""
        ids = {group_id(r) for r in rows}
        if len(ids) != 1:
            raise ValueError(f"rows of {len(ids)} groups given; write one group at a time")
        for row in rows:
            if set(row) != set(ROW_SCHEMA.names):
                missing, extra = set(ROW_SCHEMA.names) - set(row), set(row) - set(ROW_SCHEMA.names)
                raise ValueError(f"row does not match the schema: missing {sorted(missing)}, extra {sorted(extra)}")
        final = self.samples_dir / f"{ids.pop()}.parquet"
        if final.exists():
            return False
        table = pa.Table.from_pylist(rows, schema=ROW_SCHEMA)
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


def summarize(rows: pa.Table) -> pa.Table:
    """One row per arm over samples and seeds. Speedups and acceptance are ratios of sums (a long
    generation weighs more than a short one, as in throughput), not means of per-sample ratios.
    `speedup_nfe_ci95` resamples prompts (a prompt's seeds stay together: they share its text)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        groups.setdefault(tuple(row[f] for f in SUMMARY_KEY), []).append(row)
    out = []
    for key, members in sorted(groups.items()):
        n = len(members)
        total = {f: sum(r[f] for r in members) for f in
                 ("plain_nfe", "spec_nfe", "plain_wall_s", "spec_wall_s", "spec_commits",
                  "plain_tokens", "spec_tokens")}
        stale = [r["stale_hit_rate"] for r in members if r["stale_hit_rate"] is not None]
        correct = sum(bool(r["correct"]) for r in members)
        out.append(dict(zip(SUMMARY_KEY, key)) | {
            "n": n,
            "exact_rate": sum(r["exact"] for r in members) / n,
            "lossless_rate": sum(r["verdict"] != "logic-error" for r in members) / n,
            "speedup_nfe": total["plain_nfe"] / total["spec_nfe"],
            "speedup_nfe_ci95": list(speedup_interval(members)),
            "speedup_wall": total["plain_wall_s"] / total["spec_wall_s"] if total["spec_wall_s"] else None,
            "mean_accept_len": total["spec_commits"] / total["spec_nfe"],
            "accuracy": correct / n,
            "correct": correct,
            "spec_accuracy": sum(bool(r["spec_correct"]) for r in members) / n,
            "plain_nfe_per_token": total["plain_nfe"] / max(1, total["plain_tokens"]),
            "spec_nfe_per_token": total["spec_nfe"] / max(1, total["spec_tokens"]),
            "stale_hit_rate": sum(stale) / len(stale) if stale else None,
        })
    return pa.Table.from_pylist(out, schema=SUMMARY_SCHEMA)


def speedup_interval(members: list[dict[str, Any]]) -> tuple[float, float]:
    """95% interval of an arm's speedup_nfe over resampled prompts (harness/bootstrap.py)."""
    per_prompt: dict[str, tuple[int, int]] = {}
    for row in members:
        plain, spec = per_prompt.get(row["sample_id"], (0, 0))
        per_prompt[row["sample_id"]] = (plain + row["plain_nfe"], spec + row["spec_nfe"])
    plain_nfe, spec_nfe = zip(*per_prompt.values())
    return interval(resampled_speedups(plain_nfe, {"arm": spec_nfe})["arm"])


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

"""`RunDir`: writes and reads a run directory: its manifest, its checked per-sample files, its summary.

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
  rewritten, and listed with their sha256 in `index.jsonl` (`harness.runs.index`; `harness.runs.verify` verifies);
- `summary.parquet`: one row per (model, proposer, task, temperature, rule, budget), over samples
  and seeds (`harness.runs.summary`), written when the run completes, with the run's config and status
  in its Parquet metadata so a summary copied on its own still says what it summarizes.

Re-opening a directory resumes it, or extends it when the config only grows (`harness.runs.configs`);
any other config, another schema version or other checkpoint/data bytes are refused, because rows of
two configs must never be mixed, and so is a run whose records disagree with its rows
(`harness.runs.damage.resume_refusal`). Settings that do not change results (workers, Ray address) are not
part of the config.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.errors import UserError
from harness.runs import configs
from harness.runs.damage import damage_message, resume_refusal
from harness.runs.files import read_parquet, write_parquet
from harness.runs.index import append_index, quarantine
from harness.runs.schema import (
    GROUP_FIELDS,
    ROW_SCHEMA,
    SCHEMA_VERSION,
    STATUSES,
    SUMMARY_METADATA,
    Row,
    group_id,
    group_label,
    part_name,
)
from harness.runs.verify import Verification, verify
from harness.versions import git_revision, package_versions


@dataclass
class RunDir:
    path: Path
    _verified: Verification | None = field(default=None, repr=False, compare=False)
    """What `check` verified, handed to the next `verify` call (nothing is written between them)."""

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
            raise UserError(
                f"{path} holds results of schema version {version}; this spotbench reads version "
                f"{SCHEMA_VERSION}: run it again with this version"
            )
        return run

    @classmethod
    def check(
        cls,
        path: str | Path,
        config: dict[str, Any],
        inputs: dict[str, Any] | None = None,
        verification: Verification | None = None,
    ) -> RunDir:
        """Refuse (UserError) a directory that `open` would refuse, without writing anything: another
        schema version or config, other input bytes, a foreign or unwritable directory, and a run whose
        records disagree with its rows (`verification`, else verified here; the next `verify` call on
        the returned RunDir returns it)."""
        run = cls(Path(path))
        if run.manifest_path.exists():
            manifest = run.manifest()
            if manifest.get("schema_version") != SCHEMA_VERSION:
                raise UserError(
                    f"{path} holds results of schema version {manifest.get('schema_version')}, "
                    f"this spotbench writes version {SCHEMA_VERSION}; use a new output directory"
                )
            refused = configs.compare(manifest.get("config", {}), config).refused
            if refused:
                raise UserError(
                    f"{path} holds a run of a different config ({configs.describe(refused)}); a run directory "
                    "only grows (more items in list settings, a larger --limit): resume with the same settings, "
                    "extend them, or use a new output directory"
                )
            changed = configs.input_differences(inputs or {}, manifest.get("inputs", {}))
            if changed:
                raise UserError(
                    f"{path} was run with other bytes of the same inputs ({', '.join(changed)}); rows "
                    "of both would mix: restore them or use a new output directory"
                )
            verified = verification or verify(run.path)
            refusal = resume_refusal(run.path, verified.damage)
            if refusal:
                raise UserError(refusal)
            run._verified = None if verification else verified
        elif run.path.exists() and (not run.path.is_dir() or any(run.path.iterdir())):
            raise UserError(f"{path} is not empty and is not a spotbench run directory; choose another")
        check_writable(run.path)
        return run

    @classmethod
    def open(
        cls,
        path: str | Path,
        config: dict[str, Any],
        seeds: list[int],
        hardware: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        command: list[str] | None = None,
        verification: Verification | None = None,
        split_sizes: dict[str, int] | None = None,
    ) -> RunDir:
        """Create the run directory, or resume (or extend) the run it holds: damaged sample files
        (`verification`, else verified here) move to `damaged/` so their groups are decoded again.
        `split_sizes`: the prompts in each task's split (before the limit), so that a complete run says
        how many prompts its config plans (`harness.runs.verify` checks its rows against them)."""
        run = cls.check(path, config, inputs, verification)
        session = {"started": _now(), "command": command}
        if run.manifest_path.exists():
            manifest = run.manifest()
            damage = (verification or run.verify()).damage
            sizes = (manifest.get("split_sizes") or {}) | (split_sizes or {})
            extended = configs.compare(manifest["config"], config).extended
            if "limit" in extended and not configs.limit_adds_prompts(*extended["limit"], config.get("tasks"), sizes):
                extended = {k: v for k, v in extended.items() if k != "limit"}  # past every split's end: no change
                config = config | {"limit": manifest["config"]["limit"]}
            quarantine(run.path, damage)
            history = manifest.get("config_history", [])
            if extended:
                history.append({"at": _now(), "changes": {k: list(v) for k, v in extended.items()}})
            for stale in (run.summary_path, run.path / "report.html"):  # they describe the run before this one
                stale.unlink(missing_ok=True)
            manifest = {k: v for k, v in manifest.items() if k not in ("summary_sha256", "groups", "rows")}
            previous = manifest.get("inputs", {})
            run._write_manifest(
                manifest
                | {
                    "status": "running",
                    "updated": _now(),
                    "config": config,
                    "seeds": seeds,
                    "config_history": history,
                    "inputs": {
                        kind: previous.get(kind, {}) | (inputs or {}).get(kind, {}) for kind in ("checkpoints", "data", "hub")
                    },
                    "split_sizes": sizes,
                    "sessions": manifest.get("sessions", [])
                    + [
                        session
                        | {
                            "resumed": True,
                            "extended": {k: list(v) for k, v in extended.items()},
                            "damaged": [d.line() for d in damage],
                        }
                    ],
                }
            )
        else:
            run._write_manifest(
                {
                    "schema_version": SCHEMA_VERSION,
                    "status": "running",
                    "created": _now(),
                    "updated": _now(),
                    "config": config,
                    "config_history": [],
                    "seeds": seeds,
                    "command": command,
                    "git_revision": git_revision(),
                    "packages": package_versions(),
                    "hardware": hardware or {},
                    "inputs": {"checkpoints": {}, "data": {}} | (inputs or {}),
                    "sessions": [session | {"resumed": False}],
                    "split_sizes": split_sizes or {},
                }
            )
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

    def verify(self) -> Verification:
        """`harness.runs.verify.verify` of the directory; right after `check`, the verification it made."""
        verified, self._verified = self._verified, None
        return verified or verify(self.path)

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
        digest = write_parquet(pa.Table.from_pylist(records, schema=ROW_SCHEMA), final)
        append_index(
            self.path,
            {
                "file": final.name,
                "group": group,
                "label": group_label(records[0]),
                "arms": [list(a) for a in arms],
                "rows": len(records),
                "sha256": digest,
                "written": _now(),
            },
        )
        return True

    def read_rows(self) -> pa.Table:
        """Every row of the run, each once; UserError naming the damage if any file fails `verify`."""
        verification = self.verify()
        if verification.damage:
            raise UserError(damage_message(self.path, verification.damage))
        return verification.rows(ROW_SCHEMA)

    def write_summary(self) -> pa.Table:
        """Summarize the verified rows into summary.parquet, with the run's config in its metadata,
        and record its sha256 and the run's size (groups, rows) in the manifest."""
        from harness.runs.summary import summarize

        rows = self.read_rows()
        manifest = self.manifest()
        provenance = {
            "schema_version": SCHEMA_VERSION,
            "status": "complete",
            "run": str(self.path),
            **{k: manifest.get(k) for k in ("config", "seeds", "inputs", "git_revision")},
        }
        table = summarize(rows)
        table = table.replace_schema_metadata(
            (table.schema.metadata or {}) | {SUMMARY_METADATA: json.dumps(provenance, sort_keys=True).encode()}
        )
        digest = write_parquet(table, self.summary_path)
        groups = len({group_id(r) for r in rows.select(list(GROUP_FIELDS)).to_pylist()})
        self.update_manifest(summary_sha256=digest, groups=groups, rows=rows.num_rows)
        return table

    def read_summary(self) -> pa.Table:
        if not self.summary_path.exists():
            raise UserError(f"{self.path} has no summary.parquet (the run has not completed)")
        return read_parquet(self.summary_path)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        temp = self.path / ".tmp-manifest.json"
        temp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        os.replace(temp, self.manifest_path)


def check_writable(path: Path) -> None:
    """UserError (one line) if the run directory `path` could not be created or written, found by
    creating and removing a nameless temp file in it or in its nearest existing parent: a permission,
    a read-only file system or a parent that is a file fails here, before Ray starts."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(
            f"cannot create the run directory {path}: {existing} is a file, not a folder; "
            "choose another output directory"
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise UserError(
            f"cannot write the run directory {path}: {existing} is not writable "
            f"({error.strerror or error}); choose an output directory you can write"
        ) from None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")

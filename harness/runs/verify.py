"""Integrity of a run directory: what was written is what is read, once, and what the manifest says.

A run's numbers are only as good as its sample files, and a file can be cut short (a full disk, a
copy interrupted), flipped (bad storage), edited, deleted, copied twice or copied over another. So
every file the driver writes is recorded in `index.jsonl` (one JSON line per file: its group, arms,
row count and sha256, appended after the atomic rename), and Parquet page checksums are written into
the file itself. `verify` trusts a file only when

- the index lists it and its sha256 matches (anything else: not written by this run, or changed);
- it parses with page checksums on, has this version's schema and one row per key;
- every row's key columns are the group and arms its index entry names, and the file's name is the
  one that group and those arms get (a file of another group under this name, its index line
  updated, is caught by its own rows), and no other file repeats them;
- its rows are of the manifest's config (models, proposers, tasks, temperatures, rules, budgets,
  seeds, batch sizes, lengths, precision);
- for a complete run: the manifest records the summary's sha256, the run's size and each task's
  split size; every prompt the config plans (its limit, or the whole split when smaller) has every
  group and arm; the summary's sha256 matches, and the summary equals the one recomputed from the
  rows, with the manifest's config, seeds and inputs in its metadata.

What fails is a `Damage` (`harness.runs.damage`, which says who recomputes it and who refuses it).
These checks find accidental damage and inputs that do not match; a deliberate edit made
consistently (rows, index and manifest together) passes them, and `harness.runs.files.run_digest`
pins a finished run against that.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.runs.damage import Damage
from harness.runs.files import INDEX_FILE, MANIFEST_FILE, SAMPLES_DIR, SUMMARY_FILE, read_parquet, sha256_file
from harness.runs.index import read_index
from harness.runs.schema import (
    AUTO,
    GROUP_FIELDS,
    KEY_FIELDS,
    ROW_SCHEMA,
    SCHEMA_VERSION,
    SUMMARY_METADATA,
    group_id,
    group_label,
    part_name,
)

AR_RULE = "greedy"
"""The rule of autoregressive rows (`harness.decoding.autoregressive.AR_RULE`; a test keeps them equal)."""


@dataclass
class Verification:
    """The trusted part of a run directory and everything else, as `verify` found them."""

    parts: dict[str, pa.Table] = field(default_factory=dict)
    """File name -> its rows, for every verified sample file."""
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    """File name -> its index entry, for every file the index lists (verified or not)."""
    damage: list[Damage] = field(default_factory=list)

    def done_arms(self) -> dict[str, set[tuple[str, int]]]:
        """Group id -> the (proposer, budget) arms already on disk and verified."""
        done: dict[str, set[tuple[str, int]]] = {}
        for name in self.parts:
            entry = self.entries[name]
            done.setdefault(entry["group"], set()).update((p, b) for p, b in entry["arms"])
        return done

    def rows(self, schema: pa.Schema) -> pa.Table:
        tables = [self.parts[name] for name in sorted(self.parts)]
        return pa.concat_tables(tables) if tables else schema.empty_table()


def verify(directory: Path) -> Verification:
    """Check every sample file against the index, its own rows and the manifest (see the module docstring)."""
    directory = Path(directory)
    manifest, result = _manifest(directory), Verification()
    config = manifest.get("config") or {}
    result.entries, result.damage = read_index(directory)
    samples = directory / SAMPLES_DIR
    on_disk = {p.name: p for p in samples.glob("*.parquet")} if samples.is_dir() else {}
    for name, listed in sorted(result.entries.items()):
        if name not in on_disk:
            result.damage.append(Damage(f"{SAMPLES_DIR}/{name}", f"missing (listed in {INDEX_FILE})", listed["label"]))
    foreign: dict[str, pa.Table] = {}
    for name, path in sorted(on_disk.items()):
        entry = result.entries.get(name)
        data = path.read_bytes()
        problem, table = _content_problem(data, ROW_SCHEMA, SCHEMA_VERSION)
        label = entry["label"] if entry else None
        if entry is None:
            if problem is None:
                foreign[name] = table
                continue
            problem = f"{problem}; not written by this run (not in {INDEX_FILE})"
        elif hashlib.sha256(data).hexdigest() != entry["sha256"]:
            problem = problem or _changed_rows(table, entry) or "changed since it was written (sha256 differs)"
        if not problem and entry is not None:  # (a file the index does not list has its problem already)
            problem = _misfiled(name, table, entry)
        problem = problem or _outside_config(table, config)
        if problem:
            result.damage.append(Damage(f"{SAMPLES_DIR}/{name}", problem, label))
        else:
            result.parts[name] = table
    _check_overlaps(result)
    groups = {result.entries[n]["group"]: n for n in result.parts}
    for name, table in foreign.items():
        row = table.slice(0, 1).to_pylist()[0] if table.num_rows else {}
        twin = groups.get(group_id(row)) if row else None
        label = group_label(row) if row else None
        why = f"a copy of {SAMPLES_DIR}/{twin}'s group" if twin else "not written by this run"
        result.damage.append(Damage(f"{SAMPLES_DIR}/{name}", f"{why} (not in {INDEX_FILE})", label))
    records = _limit_problems(config, result)
    if manifest.get("status") == "complete":
        records += _complete_run_problems(directory, manifest, result)
    result.damage += [dataclasses.replace(d, recomputable=False) for d in records]
    return result



def _manifest(directory: Path) -> dict[str, Any]:
    try:
        value = json.loads((directory / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _content_problem(data: bytes, schema: pa.Schema, version: int) -> tuple[str | None, pa.Table | None]:
    """What is wrong with a file's bytes on their own: unreadable, wrong schema, a repeated key."""
    try:
        table = read_parquet(data)
    except (OSError, pa.ArrowException) as error:
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        reason = text.rpartition("'<Buffer>': ")[2].split(". ")[0]  # Arrow's first sentence, without the source
        if "checksum" in reason.lower():
            return f"page checksum mismatch, bits changed on disk ({reason})", None
        return f"not a readable Parquet file, truncated or corrupt ({reason})", None
    found = table.schema.metadata or {}
    if table.schema.remove_metadata() != schema.remove_metadata():
        missing = [n for n in schema.names if n not in table.schema.names]
        extra = [n for n in table.schema.names if n not in schema.names]
        detail = (f"missing {', '.join(missing[:4])}{'...' if len(missing) > 4 else ''}" if missing else "") + (
            f"{'; ' if missing else ''}unexpected {', '.join(extra[:4])}{'...' if len(extra) > 4 else ''}"
            if extra
            else ""
        )
        return f"wrong schema, not a version-{version} sample file ({detail or 'column types differ'})", table
    if found.get(b"spotbench_schema_version") != str(version).encode():
        return f"schema version {found.get(b'spotbench_schema_version', b'?').decode()}, expected {version}", table
    keys = [tuple(r.values()) for r in table.select(list(KEY_FIELDS)).to_pylist()]
    repeated = sorted({f"{k[1]}@{k[6]}" for k in keys if keys.count(k) > 1})
    if repeated:
        return f"duplicated rows: key {', '.join(repeated)} appears more than once", table
    return None, table


def _changed_rows(table: pa.Table | None, entry: dict[str, Any]) -> str | None:
    if table is not None and table.num_rows != entry["rows"]:
        change = "deleted" if table.num_rows < entry["rows"] else "added"
        return f"{table.num_rows} rows, {entry['rows']} when written (rows {change})"
    return None


def _misfiled(name: str, table: pa.Table, entry: dict[str, Any]) -> str | None:
    """Each row carries its own key: its group and arm must be the ones the file is indexed under, and
    the file's name the one they give (a file copied over another group's, its index line updated)."""
    records = table.select(list(KEY_FIELDS)).to_pylist()
    if not records:
        return "holds no rows"
    held = {group_id(r): group_label(r) for r in records}
    if set(held) != {entry["group"]}:
        return (
            f"holds rows of {', '.join(sorted(held.values()))}, not of the group it is indexed under "
            "(a file of another group in its place)"
        )
    arms = sorted((r["proposer"], r["budget"]) for r in records)
    listed = sorted((p, b) for p, b in entry["arms"])
    if arms != listed or table.num_rows != entry["rows"]:
        return f"holds arms {_arms(arms)}, its index line says {_arms(listed)} ({entry['rows']} rows)"
    if name != part_name(entry["group"], arms):
        return f"named as another file of the run; its rows belong in {SAMPLES_DIR}/{part_name(entry['group'], arms)}"
    return None


SETTINGS = {
    "model": "models",
    "proposer": "proposers",
    "task": "tasks",
    "temperature": "temperatures",
    "rule": "rules",
    "budget": "budgets",
    "seed": "seeds",
    "batch_size": "batch_sizes",
    "gen_length": "gen_length",
    "block_length": "block_length",
    "exact_mode": "exact",
    "ar_sampling": "ar_sampling",
}
"""Row column -> the config setting it must be one of (a list setting) or equal to (a scalar)."""


def _outside_config(table: pa.Table, config: dict[str, Any]) -> str | None:
    """Rows the manifest's config does not name: the manifest was edited, or the file is another run's."""
    for column, setting in SETTINGS.items():
        if config.get(setting) is None:  # not recorded, or each target's own (block_length)
            continue
        allowed = config[setting] if isinstance(config[setting], list) else [config[setting]]
        if setting == "budgets":
            allowed = [AUTO if b == "auto" else b for b in allowed]
        if setting == "rules":
            allowed = [*allowed, AR_RULE]
        outside = sorted(set(table.column(column).to_pylist()) - set(allowed), key=repr)
        if outside:
            return (
                f"rows of {column} {outside[0]!r}, which the run's config does not name ({setting} "
                f"{config[setting]!r} in {MANIFEST_FILE})"
            )
    return None


def _check_overlaps(result: Verification) -> None:
    """Two verified parts of one group must not share an arm (its rows would count twice)."""
    seen: dict[tuple[str, str, int], str] = {}
    for name in [n for n in result.entries if n in result.parts]:  # index order: the earlier file stays
        entry = result.entries[name]
        clash = next((seen[(entry["group"], p, b)] for p, b in entry["arms"] if (entry["group"], p, b) in seen), None)
        if clash:
            result.damage.append(
                Damage(
                    f"{SAMPLES_DIR}/{name}", f"duplicated rows: repeats arms of {SAMPLES_DIR}/{clash}", entry["label"]
                )
            )
            del result.parts[name]
            continue
        seen.update({(entry["group"], p, b): name for p, b in entry["arms"]})


def _prompts(result: Verification) -> dict[tuple[str, str], set[str]]:
    """(model, task) -> the sample ids of the verified rows."""
    prompts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for table in result.parts.values():
        for row in table.select(["model", "task", "sample_id"]).to_pylist():
            prompts[(row["model"], row["task"])].add(row["sample_id"])
    return prompts


def _limit_problems(config: dict[str, Any], result: Verification) -> list[Damage]:
    limit = config.get("limit")
    if not isinstance(limit, int):
        return []
    return [
        Damage(MANIFEST_FILE, f"config says limit {limit}, and the rows hold {len(ids)} prompts of {model}/{task}")
        for (model, task), ids in sorted(_prompts(result).items())
        if len(ids) > limit
    ]


def _complete_run_problems(directory: Path, manifest: dict[str, Any], result: Verification) -> list[Damage]:
    """A complete run also vouches for its size, its coverage of the config and its summary."""
    absent = [key for key in ("summary_sha256", "groups", "rows", "split_sizes") if manifest.get(key) is None]
    if absent:
        return [
            Damage(
                MANIFEST_FILE,
                f"a complete run's manifest without {', '.join(absent)} (removed after the "
                "run completed): its summary and rows cannot be checked against it",
            )
        ]
    damage = []
    found = len({entry["group"] for entry in result.entries.values()})
    if found != manifest["groups"]:
        how = "a sample file and its index line were removed" if found < manifest["groups"] else "lines were added"
        damage.append(Damage(INDEX_FILE, f"lists {found} groups, the complete run wrote {manifest['groups']} ({how})"))
    summary = directory / SUMMARY_FILE
    if not summary.exists() or sha256_file(summary) != manifest["summary_sha256"]:
        damage.append(
            Damage(
                SUMMARY_FILE,
                "missing"
                if not summary.exists()
                else "changed since the run completed (sha256 differs from the manifest)",
            )
        )
    if damage or result.damage:  # the checks below read the rows as a whole: only when each file is sound
        return damage
    rows = result.rows(ROW_SCHEMA)
    if rows.num_rows != manifest["rows"]:
        return [Damage(MANIFEST_FILE, f"says the run wrote {manifest['rows']} rows; its files hold {rows.num_rows}")]
    return _coverage_problems(manifest, result, rows) or _summary_problems(summary, manifest, rows)


def _coverage_problems(manifest: dict[str, Any], result: Verification, rows: pa.Table) -> list[Damage]:
    """Every prompt the config plans has every group and arm: a complete run holds its whole config."""
    config, sizes = manifest.get("config") or {}, manifest["split_sizes"]
    prompts = _prompts(result)
    for model in config.get("models", []):
        for task in config.get("tasks", []):
            if task not in sizes:
                return [Damage(MANIFEST_FILE, f"records no split size for task {task} (split_sizes)")]
            planned = min(config.get("limit", 0), sizes[task])
            held = len(prompts.get((model, task), ()))
            if held != planned:
                return [
                    Damage(
                        INDEX_FILE,
                        f"{model}/{task} has {held} prompts, the config plans {planned} (limit "
                        f"{config.get('limit')}, split size {sizes[task]})",
                    )
                ]
    arms = {(p, AUTO if b == "auto" else b) for p in config.get("proposers", []) for b in config.get("budgets", [])}
    done: dict[tuple, set[tuple[str, int]]] = defaultdict(set)
    rules: dict[str, set[str]] = defaultdict(set)
    for row in rows.select([*GROUP_FIELDS, "proposer", "budget"]).to_pylist():
        done[tuple(row[f] for f in GROUP_FIELDS)].add((row["proposer"], row["budget"]))
        rules[row["model"]].add(row["rule"])
    for (model, task), ids in sorted(prompts.items()):
        model_rules = [AR_RULE] if rules[model] == {AR_RULE} else config.get("rules", [])
        for sample in sorted(ids):
            for temperature in config.get("temperatures", []):
                for rule in model_rules:
                    for seed, batch_size in itertools.product(config.get("seeds", []), config.get("batch_sizes", [])):
                        key = (model, task, sample, temperature, rule, seed, batch_size)
                        missing = arms - done.get(key, set())
                        if missing:
                            label = group_label(dict(zip(GROUP_FIELDS, key)))
                            lacked = "every arm" if missing == arms else "arms " + _arms(sorted(missing))
                            return [
                                Damage(INDEX_FILE, f"group {label} lacks {lacked} of the config the manifest records")
                            ]
    return []


def _summary_problems(summary: Path, manifest: dict[str, Any], rows: pa.Table) -> list[Damage]:
    """The summary is the one its rows give, and says the run it summarizes is this one."""
    from harness.runs.summary import SUMMARY_KEY, summarize

    table = read_parquet(summary)
    recorded = json.loads((table.schema.metadata or {}).get(SUMMARY_METADATA, b"{}"))
    for key in ("config", "seeds", "inputs"):
        if recorded.get(key) != manifest.get(key):
            return [
                Damage(SUMMARY_FILE, f"its metadata's {key} differs from {MANIFEST_FILE}'s (one of them was edited)")
            ]
    expected = summarize(rows)
    if table.schema.names != expected.schema.names or table.num_rows != expected.num_rows:
        return [
            Damage(
                SUMMARY_FILE,
                f"has {table.num_rows} arms and other columns than the {expected.num_rows} arms its rows give",
            )
        ]
    found = {tuple(r[k] for k in SUMMARY_KEY): r for r in table.to_pylist()}
    for want in expected.to_pylist():
        arm = tuple(want[k] for k in SUMMARY_KEY)
        have = found.get(arm)
        if have is None:
            return [Damage(SUMMARY_FILE, f"has no arm {_arm_text(want)}, which its rows give")]
        for column, value in want.items():
            if not _same(have[column], value):
                return [
                    Damage(
                        SUMMARY_FILE,
                        f"{_arm_text(want)} {column} is {have[column]!r}, its rows give {value!r} "
                        "(the summary does not summarize these rows)",
                    )
                ]
    return []


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _arm_text(row: dict[str, Any]) -> str:
    return (
        f"{row['model']}/{row['task']} T={row['temperature']:g} {row['rule']} "
        f"{row['proposer']}@{'auto' if row['budget'] == AUTO else row['budget']}"
    )


def _arms(arms: list[tuple[str, int]]) -> str:
    return ", ".join(f"{p}@{b}" for p, b in arms)



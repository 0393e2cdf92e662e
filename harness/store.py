"""Integrity of a run directory: what was written is what is read, once.

A run's numbers are only as good as its sample files, and a file can be cut short (a full disk, a
copy interrupted), flipped (bad storage), edited, deleted or copied twice. So every file the driver
writes is recorded in `index.jsonl` (one JSON line per file: its group, arms, row count and sha256,
appended after the atomic rename), and Parquet page checksums are written into the file itself.
`verify` trusts a file only when

- the index lists it and its sha256 matches (anything else: not written by this run, or changed);
- it parses with page checksums on, has this version's schema and one row per key;
- its rows are the group and arms the index says, and no other file repeats them;
- for a complete run, the summary's sha256 matches the manifest's and no group is missing.

What fails is a `Damage` (one line each, `spotbench verify`); a resumed run moves damaged files to
`damaged/` and decodes their groups again, and `report` and `gate` refuse a damaged run.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from harness.results import RunDir

INDEX_FILE = "index.jsonl"
DAMAGED_DIR = "damaged"


@dataclass(frozen=True)
class Damage:
    """One file that cannot be trusted (or is missing), with what is wrong and which group it held."""

    file: str
    """Relative to the run directory (`samples/<name>.parquet`, `index.jsonl`, `summary.parquet`)."""
    problem: str
    group: str | None = None

    def line(self) -> str:
        return f"{self.file}{f' ({self.group})' if self.group else ''}: {self.problem}"


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


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_parquet(table: pa.Table, final: Path) -> str:
    """Write `table` with page checksums to a temp file, rename it into place; its sha256."""
    temp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    pq.write_table(table, temp, write_page_checksum=True)
    digest = sha256_file(temp)
    os.replace(temp, final)
    return digest


def read_parquet(source: Path | bytes) -> pa.Table:
    """Read with page checksums verified (a flipped bit in a data page raises, not a wrong number)."""
    return pq.read_table(pa.BufferReader(source) if isinstance(source, bytes) else source,
                         page_checksum_verification=True)


def append_index(run: RunDir, record: dict[str, Any]) -> None:
    """One line, one write, after the file it names is in place: a killed driver leaves at worst a
    file the index does not list (verified as foreign, so decoded again), never a listed ghost."""
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(run.path / INDEX_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_index(run: RunDir) -> tuple[dict[str, dict[str, Any]], list[Damage]]:
    """The latest entry per file (a `removed` record drops it) and any unreadable line."""
    entries: dict[str, dict[str, Any]] = {}
    damage = []
    path = run.path / INDEX_FILE
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
    for number, text in enumerate(lines, 1):
        try:
            record = json.loads(text)
            name = record["file"]
        except (json.JSONDecodeError, KeyError, TypeError):
            damage.append(Damage(INDEX_FILE, f"line {number} is not an index record (cut short or edited)"))
            continue
        if "removed" in record:
            entries.pop(name, None)
        else:
            entries[name] = record
    return entries, damage


def verify(run: RunDir) -> Verification:
    """Check every sample file against the index and the schema (see the module docstring)."""
    from harness.results import ROW_SCHEMA, SCHEMA_VERSION, group_id, group_label

    result = Verification()
    result.entries, result.damage = read_index(run)
    on_disk = {p.name: p for p in run.samples_dir.glob("*.parquet")} if run.samples_dir.is_dir() else {}
    for name, entry in sorted(result.entries.items()):
        if name not in on_disk:
            result.damage.append(Damage(f"samples/{name}", f"missing (listed in {INDEX_FILE})", entry["label"]))
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
        if problem:
            result.damage.append(Damage(f"samples/{name}", problem, label))
        else:
            result.parts[name] = table
    _check_overlaps(result)
    groups = {result.entries[n]["group"]: n for n in result.parts}
    for name, table in foreign.items():
        row = table.slice(0, 1).to_pylist()[0] if table.num_rows else {}
        twin = groups.get(group_id(row)) if row else None
        label = group_label(row) if row else None
        why = f"a copy of samples/{twin}'s group" if twin else "not written by this run"
        result.damage.append(Damage(f"samples/{name}", f"{why} (not in {INDEX_FILE})", label))
    result.damage += _complete_run_problems(run, result)
    return result


def _content_problem(data: bytes, schema: pa.Schema, version: int) -> tuple[str | None, pa.Table | None]:
    """What is wrong with a file's bytes on their own: unreadable, wrong schema, a repeated key."""
    from harness.results import KEY_FIELDS

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
            f"{'; ' if missing else ''}unexpected {', '.join(extra[:4])}{'...' if len(extra) > 4 else ''}" if extra else "")
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


def _check_overlaps(result: Verification) -> None:
    """Two verified parts of one group must not share an arm (its rows would count twice)."""
    seen: dict[tuple[str, str, int], str] = {}
    for name in [n for n in result.entries if n in result.parts]:  # index order: the earlier file stays
        entry = result.entries[name]
        clash = next((seen[(entry["group"], p, b)] for p, b in entry["arms"] if (entry["group"], p, b) in seen), None)
        if clash:
            result.damage.append(Damage(f"samples/{name}", f"duplicated rows: repeats arms of samples/{clash}",
                                        entry["label"]))
            del result.parts[name]
            continue
        seen.update({(entry["group"], p, b): name for p, b in entry["arms"]})


def _complete_run_problems(run: RunDir, result: Verification) -> list[Damage]:
    """A complete run also vouches for its size and its summary: both recorded in the manifest."""
    manifest = run.manifest() if run.manifest_path.exists() else {}
    if manifest.get("status") != "complete":
        return []
    damage = []
    expected = manifest.get("groups")
    found = len({entry["group"] for entry in result.entries.values()})
    if expected is not None and found < expected:
        damage.append(Damage(INDEX_FILE, f"lists {found} groups, the complete run wrote {expected} "
                                         "(a sample file and its index line were removed)"))
    summary = run.path / "summary.parquet"
    if manifest.get("summary_sha256") and (not summary.exists() or sha256_file(summary) != manifest["summary_sha256"]):
        damage.append(Damage("summary.parquet", "missing" if not summary.exists()
                             else "changed since the run completed (sha256 differs from the manifest)"))
    return damage


def quarantine(run: RunDir, damage: list[Damage]) -> None:
    """Move damaged sample files to `damaged/` (kept for inspection, never read) and drop their index
    entries, so a resumed run decodes their groups again; rewrite a damaged index without bad lines."""
    entries, index_damage = read_index(run)
    for item in damage:
        if not item.file.startswith("samples/"):
            continue
        name = item.file.removeprefix("samples/")
        source = run.samples_dir / name
        if source.exists():
            (run.path / DAMAGED_DIR).mkdir(exist_ok=True)
            os.replace(source, run.path / DAMAGED_DIR / f"{name}.{len(list((run.path / DAMAGED_DIR).iterdir()))}")
        if name in entries:
            append_index(run, {"file": name, "removed": item.problem})
            del entries[name]
    if index_damage:
        temp = run.path / f".tmp-{INDEX_FILE}"
        temp.write_text("".join(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n"
                                for e in entries.values()), encoding="utf-8")
        os.replace(temp, run.path / INDEX_FILE)


def damage_message(run: RunDir, damage: list[Damage]) -> str:
    """One line for commands that refuse a damaged run (report, gate)."""
    more = f" and {len(damage) - 1} more" if len(damage) > 1 else ""
    return (f"{run.path} is damaged: {damage[0].line()}{more}; `spotbench verify {run.path}` lists every "
            "problem, and re-running the run's command recomputes damaged groups")

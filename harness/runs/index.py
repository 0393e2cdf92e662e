"""`index.jsonl`: one JSON line per sample file the driver wrote (its group, arms, row count and sha256),
appended after the file's atomic rename, and the quarantine that moves damaged files out of a run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.runs.damage import Damage
from harness.runs.files import DAMAGED_DIR, INDEX_FILE, SAMPLES_DIR


def append_index(directory: Path, record: dict[str, Any]) -> None:
    """One line, one write, after the file it names is in place: a killed driver leaves at worst a
    file the index does not list (verified as foreign, so decoded again), never a listed ghost."""
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(directory / INDEX_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_index(directory: Path) -> tuple[dict[str, dict[str, Any]], list[Damage]]:
    """The latest entry per file (a `removed` record drops it) and any unreadable line."""
    entries: dict[str, dict[str, Any]] = {}
    damage = []
    path = directory / INDEX_FILE
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
    for number, text in enumerate(lines, 1):
        try:
            record = json.loads(text)
            name = record["file"]
            if "removed" not in record:
                _check_entry(record)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            damage.append(Damage(INDEX_FILE, f"line {number} is not an index record (cut short or edited)"))
            continue
        if "removed" in record:
            entries.pop(name, None)
        else:
            entries[name] = record
    return entries, damage


def _check_entry(record: dict[str, Any]) -> None:
    """An index record has the fields verify reads, of their types (ValueError/KeyError if not)."""
    if not (
        isinstance(record["group"], str)
        and isinstance(record["label"], str)
        and isinstance(record["sha256"], str)
        and isinstance(record["rows"], int)
        and isinstance(record["arms"], list)
        and all(isinstance(a, list) and len(a) == 2 for a in record["arms"])
    ):
        raise ValueError("not an index record")



def quarantine(directory: Path, damage: list[Damage]) -> None:
    """Move damaged sample files to `damaged/` (kept for inspection, never read) and drop their index
    entries, so a resumed run decodes their groups again; rewrite a damaged index without bad lines."""
    directory = Path(directory)
    entries, index_damage = read_index(directory)
    for item in damage:
        if not item.file.startswith(f"{SAMPLES_DIR}/"):
            continue
        name = item.file.removeprefix(f"{SAMPLES_DIR}/")
        source = directory / SAMPLES_DIR / name
        if source.exists():
            (directory / DAMAGED_DIR).mkdir(exist_ok=True)
            os.replace(source, directory / DAMAGED_DIR / f"{name}.{len(list((directory / DAMAGED_DIR).iterdir()))}")
        if name in entries:
            append_index(directory, {"file": name, "removed": item.problem})
            del entries[name]
    if index_damage:
        temp = directory / f".tmp-{INDEX_FILE}"
        temp.write_text(
            "".join(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n" for e in entries.values()),
            encoding="utf-8",
        )
        os.replace(temp, directory / INDEX_FILE)


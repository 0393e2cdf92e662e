"""The sha256 of input files (checkpoints, data), remembered between runs so a start does not read them
all again: a 16 GB checkpoint costs 20-30 s to hash, a stat costs microseconds.

A file's hash is kept under its resolved path with its size, mtime_ns, ctime_ns and inode, and is used
only while all four are what they were; any change (a write, `touch`, a copy or rename over it, a
`chmod`) means it is read and hashed again. The cache is one small JSON file,
`$SPOTBENCH_CACHE_DIR/file-hashes.json`, else under `$XDG_CACHE_HOME/spotbench`, else
`~/.cache/spotbench`, replaced atomically (temp file and rename) after a start that hashed anything.
It is only ever a shortcut: a missing, corrupt or unwritable cache means hashing as before, never a
failed run, and two drivers saving at once lose at worst each other's new entries (hashed again
next time).

The hole: a file whose bytes change while its size, mtime_ns, ctime_ns and inode stay the same keeps
its old hash, so a resume or the gate would not see the change. An ordinary write cannot do that: it
sets mtime and ctime to the current time (nanosecond fields; the kernel's clock tick, a few ms), and
`touch -r`, `cp -p` or `rsync -t` can restore an mtime but not a ctime, and a copy over the file is
a new inode. What remains is a second write within the same clock tick as the hashed one, which is
why a file changed less than `RACY_S` before it is hashed is not cached (as git treats "racily
clean" files), and bytes changed under the file system (bad storage), which no metadata shows:
`spotbench verify` of a run directory hashes its own files every time for that reason
(`harness.runs.verify`), and `SPOTBENCH_CACHE_DIR` pointed at an empty folder hashes every input afresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.runs import files

CACHE_FILE = "file-hashes.json"
VERSION = 1
RACY_S = 2.0
"""A file changed less than this before it was hashed is not cached: a further write within the same
timestamp tick (a few ms on Linux, 1-2 s on some network and FAT file systems) would leave its stat as
it was."""
STAT_FIELDS = ("size", "mtime_ns", "ctime_ns", "inode")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def cache_path() -> Path | None:
    """`$SPOTBENCH_CACHE_DIR`, else `$XDG_CACHE_HOME/spotbench` (absolute, as the XDG spec wants), else
    `~/.cache/spotbench`, with the cache file's name; None when there is no home to put it in."""
    explicit = os.environ.get("SPOTBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit) / CACHE_FILE
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "spotbench" / CACHE_FILE
    try:
        return Path.home() / ".cache" / "spotbench" / CACHE_FILE
    except RuntimeError:  # no HOME and no passwd entry
        return None


def _stamp(stat: os.stat_result) -> dict[str, int]:
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns, "inode": stat.st_ino}


def _valid(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and all(type(entry.get(name)) is int for name in STAT_FIELDS)
        and isinstance(entry.get("sha256"), str)
        and _SHA256.fullmatch(entry["sha256"]) is not None
    )


def _read(path: Path | None) -> dict[str, dict[str, Any]]:
    """The valid entries of the cache file; none when it is missing, unreadable, not JSON or of another version."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("files"), dict):
        return {}
    return {name: entry for name, entry in data["files"].items() if _valid(entry)}


class HashCache:
    """sha256 of files by their stat. Make one per start, hash through `sha256`, then `save`."""

    def __init__(self, path: Path | None = None):
        self.path = path if path is not None else cache_path()
        self.entries = _read(self.path)
        self.new: dict[str, dict[str, Any]] = {}

    def sha256(self, path: str | Path) -> str:
        """The file's sha256: the cached one while its stat is unchanged, else read and hashed."""
        resolved = Path(path).resolve()
        name = str(resolved)
        before = _stamp(os.stat(resolved))
        entry = self.new.get(name) or self.entries.get(name)
        if entry is not None and all(entry[field] == before[field] for field in STAT_FIELDS):
            return str(entry["sha256"])
        digest = files.sha256_file(resolved)
        try:
            after = _stamp(os.stat(resolved))
        except OSError:  # gone while it was read: nothing to remember
            return digest
        changed_at = max(after["mtime_ns"], after["ctime_ns"])
        if after == before and time.time_ns() - changed_at >= RACY_S * 1e9:  # not written while or just before
            self.new[name] = after | {"sha256": digest}
        return digest

    def save(self) -> None:
        """Merge what this start hashed into the cache file (re-read, so a concurrent start's entries
        stay), dropping entries of files that are gone; atomically, and silently not at all when the
        folder cannot be written."""
        if self.path is None or not self.new:
            return
        entries = {name: e for name, e in _read(self.path).items() if os.path.exists(name)} | self.new
        temp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=self.path.parent)
            with os.fdopen(handle, "w") as out:
                json.dump({"version": VERSION, "files": entries}, out, indent=1, sort_keys=True)
            os.replace(temp, self.path)
            temp = None
        except OSError:
            pass
        finally:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
        self.entries, self.new = entries, {}

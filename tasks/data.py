"""Finding benchmark rows: local files in the data dir first, else the Hugging Face hub.

Local files win because they are byte-identical to the published data and need no network; the hub
is used only when the files are absent and a quick check says it is reachable (never waiting on
network timeouts, and never when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set).

A local file (JSON lines, gzipped when its name ends in .gz) is read line by line, giving the rows
`datasets`' json loader gives, so that a damaged one (truncated, empty, not JSON, a row without a
field the task reads) is a one-line error naming the file and line, not a traceback from the loader
or a KeyError in the task.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import tasks
from harness.errors import UserError

DATA_ENV = "SPOTBENCH_DATA_DIR"
HUB_HOST = "huggingface.co"


@dataclass(frozen=True)
class Source:
    """Where a benchmark split lives: a file in the data dir, and its hub equivalent."""

    filename: str
    hub_id: str
    hub_config: str | None = None
    hub_split: str = "test"
    fields: tuple[str, ...] = ()
    """The keys every row must have: those the task reads."""


def data_dir(override: str | os.PathLike | None = None) -> tuple[Path, str]:
    """The data dir and how it was chosen: --data-dir, then $SPOTBENCH_DATA_DIR, then the
    `shared/data` folder beside the project root."""
    if override:
        return Path(override).expanduser(), "--data-dir"
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser(), f"${DATA_ENV}"
    return Path(tasks.__file__).resolve().parents[1].parent / "shared" / "data", "default"


def hub_offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


@cache
def hub_reachable(timeout_s: float = 1.5) -> bool:
    """A TCP connect to the hub, bounded including DNS (which ignores socket timeouts)."""
    if hub_offline():
        return False
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((HUB_HOST, 443), timeout=timeout_s).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    return bool(result and result[0])


def status(source: Source, override: str | None = None) -> str:
    """'local <path>', 'hub <id>' or 'missing' (for `spotbench tasks list`)."""
    path = data_dir(override)[0] / source.filename
    if path.is_file():
        return f"local {path}"
    return f"hub {source.hub_id}" if hub_reachable() else "missing"


def load_rows(task: str, source: Source, override: str | None = None) -> list[dict[str, Any]]:
    """All rows of one split as plain dicts: the local file's, else the hub's (through `datasets`)."""
    directory, chosen_by = data_dir(override)
    path = directory / source.filename
    if path.is_file():
        return read_rows(task, source, path)
    if hub_reachable():
        import datasets

        datasets.disable_progress_bars()
        return datasets.load_dataset(source.hub_id, source.hub_config, split=source.hub_split).to_list()
    why = "HF_HUB_OFFLINE is set" if hub_offline() else "the Hugging Face hub is not reachable"
    raise UserError(
        f"task {task}: no data: {path} does not exist (data dir from {chosen_by}) and {why} "
        f"(hub id {source.hub_id}); put {source.filename} in a folder and pass --data-dir DIR "
        f"or set {DATA_ENV}=DIR"
    )


def read_rows(task: str, source: Source, path: Path) -> list[dict[str, Any]]:
    """The rows of a local JSON-lines file, each a JSON object with the source's fields."""

    def fail(problem: str) -> UserError:
        return UserError(
            f"task {task}: {path} {problem}; replace it with the published file "
            f"(hub id {source.hub_id}) or remove it to load the split from the hub"
        )

    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    rows.append(_row(line, number, source.fields, fail))
    except OSError as error:  # unreadable, or not gzip data
        raise fail(f"cannot be read ({error.strerror or error})") from None
    except (EOFError, UnicodeDecodeError):  # a gzip stream cut short; bytes that are not text
        raise fail("is truncated or not UTF-8 text") from None
    if not rows:
        raise fail("has no rows")
    return rows


def _row(line: str, number: int, fields: tuple[str, ...], fail: Callable[[str], UserError]) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise fail(f"line {number} is not JSON ({error.msg}): the file is truncated or not JSON lines") from None
    if not isinstance(row, dict):
        raise fail(f"line {number} is not a JSON object")
    missing = [name for name in fields if name not in row]
    if missing:
        raise fail(f"line {number} has no {', '.join(missing)} (each row needs {', '.join(fields)})")
    return row

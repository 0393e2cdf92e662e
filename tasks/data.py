"""Finding benchmark rows: local files in the data dir first, else the Hugging Face hub.

Local files win because they are byte-identical to the published data and need no network; the hub
is used only when the files are absent and a quick check says it is reachable (never waiting on
network timeouts, and never when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set).
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from harness.errors import UserError

import tasks

DATA_ENV = "SPOTBENCH_DATA_DIR"
HUB_HOST = "huggingface.co"


@dataclass(frozen=True)
class Source:
    """Where a benchmark split lives: a file in the data dir, and its hub equivalent."""

    filename: str
    hub_id: str
    hub_config: str | None = None
    hub_split: str = "test"


def data_dir(override: str | os.PathLike | None = None) -> tuple[Path, str]:
    """The data dir and how it was chosen: --data-dir, then $SPOTBENCH_DATA_DIR, then the
    `shared/data` folder beside the project root."""
    if override:
        return Path(override).expanduser(), "--data-dir"
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser(), f"${DATA_ENV}"
    return Path(tasks.__file__).resolve().parents[1].parent / "shared" / "data", "default"


def hub_offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


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
    """All rows of one split as plain dicts, loaded through `datasets`."""
    import datasets

    datasets.disable_progress_bars()
    directory, chosen_by = data_dir(override)
    path = directory / source.filename
    if path.is_file():
        dataset = datasets.load_dataset("json", data_files=str(path), split="train")
    elif hub_reachable():
        dataset = datasets.load_dataset(source.hub_id, source.hub_config, split=source.hub_split)
    else:
        why = "HF_HUB_OFFLINE is set" if hub_offline() else "the Hugging Face hub is not reachable"
        raise UserError(
            f"task {task}: no data: {path} does not exist (data dir from {chosen_by}) and {why} "
            f"(hub id {source.hub_id}); put {source.filename} in a folder and pass --data-dir DIR "
            f"or set {DATA_ENV}=DIR"
        )
    return dataset.to_list()

"""What a run read and where it ran, for its manifest: checkpoint and data hashes, the driver's hardware.

Hashes are taken where they are cheap and where a change would silently change results under the
same config: the SPOT checkpoint folder a `spot` / `spot:PATH` proposer names (a few MB; retraining
into the same folder keeps the name), and the task data files in the data dir (`SPOTBENCH_DATA_DIR`)
that a task reads. A resumed run refuses other bytes under the same names (`harness.results`), and
the gate refuses to compare runs that read different bytes (`harness.configs`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from cluster.suite import Suite
from harness.store import sha256_file


def run_inputs(suite: Suite) -> dict[str, dict[str, str]]:
    """{"checkpoints": {proposer spec: sha256}, "data": {file name: sha256}} for the suite."""
    from proposers.registry import spot_folder
    from tasks.registry import get_task

    checkpoints = {spec: folder_sha256(spot_folder(spec.partition(":")[2] or None))
                   for spec in suite.proposers if spec.partition(":")[0] == "spot"}
    data = {path.name: sha256_file(path) for name in suite.tasks for path in task_data_files(get_task(name))}
    return {"checkpoints": checkpoints, "data": data}


def folder_sha256(folder: Path) -> str:
    """One digest over every file of a folder: relative paths and contents, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def task_data_files(task: Any) -> list[Path]:
    """The local files of the data sources a task's module declares (`tasks.data.Source` constants,
    alone or in a dict by split) that exist in the data dir: what the task reads instead of the hub.
    Built-in tasks (arith) declare none."""
    from tasks.data import Source, data_dir

    constants = vars(sys.modules[type(task).__module__]).values()
    sources = [c for c in constants if isinstance(c, Source)]
    sources += [s for c in constants if isinstance(c, dict) for s in c.values() if isinstance(s, Source)]
    directory = data_dir()[0]
    return sorted({directory / s.filename for s in sources if (directory / s.filename).is_file()})


def driver_hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"host": socket.gethostname(), "platform": platform.platform(),
                            "cpus": os.cpu_count()}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return info

"""What a run read and where it ran, for its manifest: checkpoint and data hashes, the driver's hardware,
and what loading each model cost each worker.

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
import resource
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cluster.suite import Suite
from harness.store import sha256_file

T = TypeVar("T")


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


def measure_load(load: Callable[[], T], model: str) -> tuple[T, dict[str, Any]]:
    """Run `load` (a target's checkpoint to its device) and say what it cost: `load_s` (wall seconds)
    and `peak_memory_bytes`, the device's peak allocation during the load on a GPU
    (`torch.cuda.max_memory_allocated`, what an 8B checkpoint must fit in) and the process's peak
    resident set on a CPU (`ru_maxrss`: the worker's peak so far, every model it holds included)."""
    import torch

    for index in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        torch.cuda.reset_peak_memory_stats(index)
    start = time.perf_counter()
    target = load()
    load_s = time.perf_counter() - start
    device = getattr(target, "device", torch.device("cpu"))
    if device.type == "cuda":
        peak, kind = torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    else:
        peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_peak_rss"
    dtype = str(getattr(target, "dtype", "")).removeprefix("torch.")
    return target, {"model": model, "device": str(device), "dtype": dtype, "load_s": round(load_s, 3),
                    "peak_memory_bytes": int(peak), "memory": kind}

"""What a run read and where it ran, for its manifest: checkpoint and data hashes, the driver's hardware,
and what loading each model cost each worker.

Hashes are taken of everything whose change would silently change results under the same config:
each target's checkpoint (a zoo target's or checkpoint folder's config, weights and tokenizer files,
a GGUF file; retraining into the same folder keeps the name), the files each proposer's family says
its argument names (`proposers.family.ProposerFamily.files`: a checkpoint folder; and `models`, a
`draft-model:NAME`'s weights), and the task data files in the data dir (`SPOTBENCH_DATA_DIR`) that a
task reads. Targets built in code
(`tiny-random:*`) and training-free proposers read no file: the git revision pins them. A resumed
run refuses other bytes under the same names (`harness.runs.run_dir`), and the gate refuses to compare
runs that read different bytes (`harness.runs.configs`). A file's hash is remembered between starts by its
path and stat (`harness.hash_cache`, where the one change it cannot see is described), so a start
reads only the files that changed.
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
from harness.hash_cache import HashCache
from harness.runs.files import sha256_file

T = TypeVar("T")


MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "*.gguf",
    "pytorch_model*.bin",
    "pytorch_model*.bin.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
    "converted.json",
)
"""The files of a checkpoint folder that loading reads (config, weights, tokenizer, chat template, a
converted target's record, which names its base and that base's hash); others (a README, a training
report, an `original/` copy of the weights) change no result."""


def run_inputs(suite: Suite) -> dict[str, dict[str, str]]:
    """{"checkpoints": {model name or proposer spec: sha256}, "data": {file name: sha256}, "hub": {hub id
    or spec naming one: "ORG/NAME@COMMIT: its files"}} for the suite; files unchanged since an earlier
    start are not read again (`harness.hash_cache`). A hub id's snapshot is hashed as a local folder is."""
    from tasks.registry import get_task

    cache = HashCache()
    checkpoints = {}
    for name in suite.models:
        files = model_files(name)
        if files:
            checkpoints[name] = files_sha256(files, cache.sha256)
        base = converted_base(name)
        base_files = model_files(base) if base is not None else []
        if base_files:  # a converted target is a delta: its base's weights are an input too
            checkpoints[f"{name} base {base}"] = files_sha256(base_files, cache.sha256)
    for spec in suite.proposers:
        files = proposer_files(spec)
        if files:
            checkpoints[spec] = files_sha256(files, cache.sha256)
    data = {path.name: cache.sha256(path) for name in suite.tasks for path in task_data_files(get_task(name))}
    cache.save()
    return {"checkpoints": checkpoints, "data": data, "hub": hub_records(suite)}


def hub_records(suite: Suite) -> dict[str, str]:
    """Which commit of which hub repository each hub-named model or checkpoint resolved to, and its files."""
    from harness.bundled import ZOO_DIR
    from harness.targets.hub import is_hub_id, snapshot

    committed = (ZOO_DIR / "proposers", ZOO_DIR / "drafters")
    named = {name: (name, ()) for name in suite.models} | {
        spec: (spec.partition(":")[2].partition(":")[0], committed) for spec in suite.proposers if ":" in spec
    }
    return {key: snapshot(name).record() for key, (name, under) in named.items() if is_hub_id(name, *under)}


def model_files(name: str) -> list[Path]:
    """The files a target name loads from (none for targets built in code)."""
    from harness.targets.ar import SMOLLM2, smollm2_file
    from harness.targets.zoo import model_folder

    if name.startswith("tiny-random"):
        return []
    if name == SMOLLM2:
        return [smollm2_file()]
    path = model_folder(name)
    return [path] if path.is_file() else checkpoint_files(path)


def converted_base(name: str) -> str | None:
    """The base a converted target is a delta over (None for any other target)."""
    from harness.targets.converted import is_converted, read_meta
    from harness.targets.zoo import model_folder

    folder = model_folder(name)
    return read_meta(folder)["base"] if is_converted(folder) else None


def checkpoint_files(folder: Path) -> list[Path]:
    return sorted({p for pattern in MODEL_FILES for p in folder.glob(pattern) if p.is_file()})


def proposer_files(spec: str) -> list[Path]:
    """Every file a proposer spec reads: what its family says the argument names, and the checkpoint
    files of the models it loads (none for training-free proposers)."""
    from proposers.registry import proposer_inputs

    files, models = proposer_inputs(spec)
    return sorted({*files, *(path for model in models for path in model_files(model))})


def files_sha256(files: list[Path], file_sha256: Callable[[Path], str] = sha256_file) -> str:
    """One digest over files: their names (relative to their common folder) and contents (each hashed by
    `file_sha256`), in sorted order; for one folder's files the same as `folder_sha256` of the folder."""
    files = sorted(Path(os.path.abspath(p)) for p in files)  # not resolved: a hub snapshot links to blobs/
    root = files[0].parent if len(files) == 1 else Path(os.path.commonpath(files))
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(root)}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


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
    info: dict[str, Any] = {"host": socket.gethostname(), "platform": platform.platform(), "cpus": os.cpu_count()}
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
    return target, {
        "model": model,
        "device": str(device),
        "dtype": dtype,
        "load_s": round(load_s, 3),
        "peak_memory_bytes": int(peak),
        "memory": kind,
    }

"""The driver: shard a suite's prompts over Ray worker actors, write rows as they arrive, resume.

Work is planned per group (a `Unit`: one sample of one (model, task) at one (temperature, rule,
seed), i.e. one plain reference and all of its arms): the finest unit that keeps an arm next to its
reference, so the last units of a run spread evenly over the workers. Each
worker actor holds one `Evaluator` (targets loaded once, on first use) and gets at most two units in
flight, so it never waits for the driver. The driver is the only writer: it writes each finished
group atomically under a name derived from the group key and skips groups already on disk, so

- a worker that dies (node lost, OOM, killed) is replaced by a fresh actor and its in-flight units
  are sent again; whatever they had computed was never written, so every row lands exactly once;
- a driver that dies leaves complete group files and at worst a stray temp file; the next
  invocation with the same config plans only the groups that are missing.

Why explicit actors rather than Ray Data's `map_batches` with an actor pool: see docs/runs.md.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.evaluate import Evaluator, Unit
from cluster.suite import Suite
from harness.errors import UserError
from harness.results import RunDir, group_id

IN_FLIGHT_PER_WORKER = 2
MAX_ATTEMPTS = 3
"""A unit whose worker died this many times is a bug in the unit (e.g. it exhausts memory)."""


@dataclass
class RunResult:
    run_dir: RunDir
    summary: Any
    """pyarrow Table (see harness.summary.SUMMARY_SCHEMA)."""
    written: int
    skipped: int
    workers: int


def plan(suite: Suite, run_dir: RunDir) -> tuple[list[Unit], int]:
    """The units still to do and the number of groups already on disk."""
    evaluator = Evaluator(suite)
    done = run_dir.done_groups()
    units, skipped = [], 0
    for model in suite.models:
        for task in suite.tasks:
            for sample in evaluator.task(task).load(suite.split, limit=suite.limit):
                key = {"model": model, "task": task, "sample_id": sample.sample_id}
                pending = tuple(g for g in suite.groups() if group_id(
                    key | {"temperature": g[0], "rule": g[1], "seed": g[2]}) not in done)
                skipped += len(suite.groups()) - len(pending)
                units += [Unit(model, task, sample, (group,)) for group in pending]
    return units, skipped


def run_suite(suite: Suite, output: str | Path, address: str | None = None, progress: bool = True,
              on_write: Callable[[int], None] | None = None) -> RunResult:
    """Run (or resume) `suite` into `output`; `on_write(groups written so far)` after each group.

    Everything that can refuse the run (the output directory, the Ray address) is checked before
    the first byte is written, so bad input leaves no half-made run directory behind."""
    if address:
        check_address(address)
    units, skipped = plan(suite, RunDir.check(output, suite.config()))
    owns_ray = bool(units) and connect(address)
    try:
        run_dir = RunDir.open(output, suite.config(), list(suite.seeds), hardware=driver_hardware())
        try:
            written, workers = _execute(suite, run_dir, units, skipped, progress, on_write) if units else (0, 0)
            summary = run_dir.write_summary()
        except BaseException as error:
            run_dir.update_manifest(status="failed", error=f"{type(error).__name__}: {error}")
            raise
    finally:
        if owns_ray:
            import ray

            ray.shutdown()
    run_dir.update_manifest(status="complete", error=None, rows=sum(summary.column("n").to_pylist()))
    return RunResult(run_dir, summary, written, skipped, workers)


def connect(address: str | None) -> bool:
    """Start a local Ray instance or join the cluster at `address`; False when Ray was already up
    in this process (a test, a notebook), which then keeps it."""
    import ray

    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        else:
            ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False,
                     object_store_memory=256 * 2**20)
    except ConnectionError as error:
        raise UserError(f"no Ray cluster at --address {address}: {error}") from None
    return True


def _execute(suite: Suite, run_dir: RunDir, units: list[Unit], skipped: int, progress: bool,
             on_write: Callable[[int], None] | None) -> tuple[int, int]:
    import ray
    from tqdm import tqdm

    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    # each worker holds a GPU or at least a CPU for its lifetime: more than fit would never start
    count = min(suite.workers or gpus or cpus, gpus or cpus, len(units))
    threads = 1 if gpus else worker_threads(cpus, count)
    run_dir.update_manifest(hardware=driver_hardware() | {
        "ray_nodes": len([n for n in ray.nodes() if n["Alive"]]), "ray_cpus": cpus, "ray_gpus": gpus,
        "workers": count, "threads_per_worker": threads})
    options = {"num_gpus": 1, "num_cpus": 1} if gpus else {"num_cpus": threads}
    worker_class = ray.remote(max_restarts=0, **options)(Worker)
    total = skipped + sum(len(u.groups) for u in units)
    bar = tqdm(total=total, initial=skipped, unit="group", desc="spotbench run", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    written = _dispatch(worker_class, count, threads, suite, run_dir, units, bar, on_write)
    bar.close()
    return written, count


def _dispatch(worker_class: Any, count: int, threads: int, suite: Suite, run_dir: RunDir,
              units: list[Unit], bar: Any, on_write: Callable[[int], None] | None) -> int:
    import ray
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

    queue = deque(units)
    attempts: dict[Unit, int] = {}
    actors = [worker_class.remote(suite, threads) for _ in range(count)]
    in_flight: dict[Any, tuple[int, Any, Unit]] = {}
    written = 0

    def feed(index: int) -> None:
        busy = sum(1 for i, _, _ in in_flight.values() if i == index)
        while queue and busy < IN_FLIGHT_PER_WORKER:
            unit = queue.popleft()
            in_flight[actors[index].evaluate.remote(unit)] = (index, actors[index], unit)
            busy += 1

    for index in range(count):
        feed(index)
    while in_flight:
        [ref], _ = ray.wait(list(in_flight), num_returns=1)
        index, actor, unit = in_flight.pop(ref)
        try:
            groups = ray.get(ref)
        except (RayActorError, ActorDiedError, ActorUnavailableError):
            attempts[unit] = attempts.get(unit, 0) + 1
            if attempts[unit] >= MAX_ATTEMPTS:
                raise RuntimeError(f"{unit.model}/{unit.task}/{unit.sample.sample_id}: its worker died "
                                   f"{MAX_ATTEMPTS} times") from None
            if actors[index] is actor:  # first news of this death: replace the actor once
                ray.kill(actor, no_restart=True)
                actors[index] = worker_class.remote(suite, threads)
            queue.appendleft(unit)
        except RayTaskError as error:
            if isinstance(error.cause, UserError):
                raise error.cause from None
            raise
        else:
            for rows in groups:
                if run_dir.write_group(rows):
                    written += 1
                bar.update(1)
                if on_write:
                    on_write(written)
        feed(index)
    return written


class Worker:
    """A Ray actor (decorated in `_execute`, with the resources of the cluster at hand)."""

    def __init__(self, suite: Suite, threads: int):
        import ray
        import torch

        torch.set_num_threads(threads)
        self.evaluator = Evaluator(suite)
        node = ray.get_runtime_context().get_node_id()[:12]
        self.evaluator.worker = f"{node}:{self.evaluator.worker}"  # rows say which node and process

    def pid(self) -> int:
        return os.getpid()

    def evaluate(self, unit: Unit) -> list[list[dict[str, Any]]]:
        return self.evaluator.evaluate(unit)


def worker_threads(cpus: int, workers: int) -> int:
    """Torch threads (and reserved CPUs) per CPU worker: the cluster's cores shared out, capped by
    the driver's OMP_NUM_THREADS when set: on a machine shared with other jobs, idle OpenMP threads
    spin-wait and can slow small models down by orders of magnitude."""
    threads = max(1, cpus // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(cap)) if cap.isdigit() and int(cap) > 0 else threads


def check_address(address: str) -> None:
    """Fail fast (and before anything is written) on an address that is not host:port (or auto), or
    where nothing listens: `ray.init` would raise a traceback or retry for minutes."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--address {address} is not host:port; give the Ray head's host:port, or auto")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()
    except OSError as error:
        raise UserError(f"no Ray cluster at --address {address}: {error.strerror or error}") from None


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

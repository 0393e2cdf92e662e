"""The worker actors of a run: how many the cluster holds, how many threads each gets, whether there
is room for one more, and the actor itself (one `UnitDecoder`, targets loaded once)."""

from __future__ import annotations

import os
import time
from typing import Any

from cluster.suite import Suite
from cluster.unit_decoder import Unit, UnitDecoder
from harness.errors import UserError
from harness.runs.schema import Row

ROOM_WAIT_S = 10.0
"""How long a dead worker's resources may take to show up as free before the driver decides the
cluster has no room for a replacement (a killed process frees them in well under a second; a lost
node's never come back)."""


def room_for(need: dict[str, float], wait_s: float = ROOM_WAIT_S) -> bool:
    """Whether the cluster has the resources of one more worker free, waiting up to `wait_s` for a
    dead worker's to be released: an actor created without room waits for them for ever."""
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        free = ray.available_resources()
        if all(free.get(kind, 0.0) >= amount for kind, amount in need.items()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)


class Worker:
    """A Ray actor (decorated in `cluster.runner._execute`, with the resources of the cluster at hand)."""

    def __init__(self, suite: Suite, threads: int):
        import ray
        import torch

        torch.set_num_threads(threads)
        self.unit_decoder = UnitDecoder(suite)
        node = ray.get_runtime_context().get_node_id()[:12]
        self.unit_decoder.worker = f"{node}:{self.unit_decoder.worker}"  # rows say which node and process

    def decode(self, unit: Unit) -> list[list[Row]]:
        return self.unit_decoder.decode(unit)

    def loads(self) -> list[dict[str, Any]]:
        return self.unit_decoder.loads


def gpu_workers(suite: Suite, cluster_gpus: float) -> int:
    """How many GPU workers the cluster holds (0: CPU workers), refusing a device it cannot give."""
    if suite.device == "cpu":
        return 0
    if suite.device.startswith("cuda") and cluster_gpus == 0:
        raise UserError(f"--device {suite.device}, but the Ray cluster has no GPU; use --device cpu or auto")
    if cluster_gpus and suite.gpus_per_worker > cluster_gpus:
        raise UserError(
            f"--gpus-per-worker {suite.gpus_per_worker:g} is more than the cluster's "
            f"{cluster_gpus:g} GPU(s); use at most {cluster_gpus:g}"
        )
    return int(cluster_gpus / suite.gpus_per_worker + 1e-9)


def worker_threads(cpus: int, workers: int) -> int:
    """Torch threads (and reserved CPUs) per CPU worker: the cluster's cores shared out, capped by
    the driver's OMP_NUM_THREADS when set: on a machine shared with other jobs, idle OpenMP threads
    spin-wait and can slow small models down by orders of magnitude."""
    threads = max(1, cpus // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(cap)) if cap.isdigit() and int(cap) > 0 else threads

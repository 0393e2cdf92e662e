"""Ray tasks whose results come back in the order they were submitted.

Why: `spotbench train-proposer --workers` splits deterministic work (generations) over processes and
must give the same output for any number of them, so results are gathered in job order, with
`workers` tasks in flight (one new task per finished one, each finished result released so the
object store does not grow with the job count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


def _single_threaded(fn: Callable[..., Any], job: Any, *shared: Any) -> Any:
    """One CPU per task: torch would otherwise start a thread per core in every worker."""
    import torch

    torch.set_num_threads(1)
    return fn(job, *shared)


def map_in_order(
    fn: Callable[..., Any], jobs: Sequence[Any], shared: tuple = (), workers: int = 1, address: str | None = None
) -> Iterator[Any]:
    """`fn(job, *shared)` for every job as a Ray task (one CPU each), yielded in job order.

    `fn` must be importable by the workers (a module-level function); `shared` is put in the object
    store once for all tasks. `address` joins an existing cluster, else a local Ray starts (and stops
    when the iteration ends).
    """
    import ray

    from cluster.connect import ray_session

    with ray_session(address):
        task = ray.remote(num_cpus=1, max_retries=0)(_single_threaded)
        shared_refs = [ray.put(value) for value in shared]
        in_flight = [task.remote(fn, job, *shared_refs) for job in jobs[:workers]]
        for i in range(len(jobs)):
            result = ray.get(in_flight[i])
            in_flight[i] = None
            if i + workers < len(jobs):
                in_flight.append(task.remote(fn, jobs[i + workers], *shared_refs))
            yield result

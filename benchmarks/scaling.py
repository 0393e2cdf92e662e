"""Worker scaling of `spotbench run` (a script, not a test).

Runs the default suite (cluster.suite.Suite()) twice in this process on one local Ray instance,
with 1 and with 2 workers, each into a fresh run directory, and prints the throughput of each
(groups = prompt x temperature, each with its plain reference and every arm) and their ratio.
Two numbers per run: end to end (actor start-up and model loading included, as a user sees it) and
steady state (first to last group written). Exit 1 when the end-to-end ratio is below --floor.
Needs as many free cores as workers: run it when no training job shares the machine.

    python benchmarks/scaling.py [--limit 24] [--floor 1.6]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import ray

from cluster.runner import run_suite
from cluster.suite import Suite


def measure(suite: Suite, output: Path) -> tuple[float, float, int]:
    """(end-to-end s, steady-state s, groups) of one run."""
    writes: list[float] = []
    start = time.perf_counter()
    result = run_suite(suite, output, progress=False, on_write=lambda _: writes.append(time.perf_counter()))
    end = time.perf_counter()
    return end - start, writes[-1] - writes[0], result.written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=Suite().limit)
    parser.add_argument("--floor", type=float, default=1.6)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one torch thread per worker: compare workers, not threads
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=256 * 2**20)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            suite = dataclasses.replace(Suite(), limit=args.limit, workers=workers)
            results[workers] = measure(suite, Path(tmp) / f"w{workers}")
    ray.shutdown()
    print(f"{'workers':>8}{'groups':>8}{'end-to-end s':>14}{'groups/s':>10}{'steady s':>10}{'groups/s':>10}")
    for workers, (total, steady, groups) in results.items():
        print(
            f"{workers:>8}{groups:>8}{total:>14.1f}{groups / total:>10.2f}{steady:>10.1f}{(groups - 1) / steady:>10.2f}"
        )
    (t1, s1, g1), (t2, s2, g2) = results[1], results[2]
    ratio, steady_ratio = (g2 / t2) / (g1 / t1), ((g2 - 1) / s2) / ((g1 - 1) / s1)
    print(
        f"throughput ratio 2 vs 1 workers: {ratio:.2f}x end to end, {steady_ratio:.2f}x steady state "
        f"(floor {args.floor:.2f}x)"
    )
    return 0 if ratio >= args.floor else 1


if __name__ == "__main__":
    sys.exit(main())

"""The driver: shard a suite's prompts over Ray worker actors, write rows as they arrive, resume.

Work is planned in units of groups (a `Unit`: a few prompts of one (model, task) at one (temperature,
rule, seed) and batch size, i.e. their plain references and the arms of them still to do): a worker
decodes a unit's prompts together, `batch_size` at a time, every arm next to its reference; units hold
at most UNIT_BATCHES batches, so the last units of a run spread over the workers. Each worker actor
holds one `UnitDecoder` (targets loaded once, on first use) and gets at most two units in flight, so it
never waits for the driver. The driver is the only writer: it writes each finished group atomically
under a name derived from the group key and its arms, and plans only what is not verified on disk
(`harness.runs.verify`), so

- a worker that dies (process killed, OOM) is replaced when the cluster has room for a new one, and
  its in-flight units are sent again; whatever they had computed was never written, so every row
  lands exactly once. When the cluster has no room (its node is gone, and a replacement would wait
  forever for CPUs the live workers hold), the units go to the live workers; when none is left the
  run stops with one line and a resumable directory;
- a driver that dies leaves complete group files and at worst a stray temp file; the next invocation
  with the same config plans only the groups that are missing, and decodes damaged ones again;
- a config that only grows (more budgets, proposers, seeds, temperatures, a larger limit) reuses
  every finished group and decodes only the new groups and arms.

Why explicit actors rather than Ray Data's `map_batches` with an actor pool: see docs/runs.md.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster.connect import check_address, quiet_stdout, ray_session
from cluster.provenance import driver_hardware, run_inputs
from cluster.suite import Suite, check_targets
from cluster.unit_decoder import Unit, UnitDecoder
from cluster.workers import Worker, gpu_workers, room_for, worker_threads
from harness.errors import UserError
from harness.passes_only import UNIT_PROMPTS as PASSES_ONLY_UNIT
from harness.runs.run_dir import RunDir
from harness.runs.schema import group_id
from harness.runs.verify import Verification
from harness.targets.devices import resolve_device

IN_FLIGHT_PER_WORKER = 2
UNIT_BATCHES = 2
"""Batches of prompts per unit: a finished prompt's place in the batch goes to the next one of its
unit (continuous batching), and units stay small enough to spread over the workers."""
MAX_ATTEMPTS = 3
"""A unit whose worker died this many times is a bug in the unit (e.g. it exhausts memory)."""
LOADS_WAIT_S = 30.0
"""How long the driver waits for the workers' load records at the end of a session."""


class ClusterLost(UserError):
    """Every worker died and the cluster has no room for another: the run stops, resumable."""


@dataclass
class RunResult:
    run_dir: RunDir
    summary: Any
    """pyarrow Table (see harness.runs.summary.SUMMARY_SCHEMA)."""
    written: int
    skipped: int
    workers: int
    first_group_s: float | None = None
    """Seconds from this invocation's start to the first group it wrote (None: it wrote none)."""


@dataclass
class Stats:
    """What one invocation did, for its session record in the manifest."""

    written: int = 0
    skipped: int = 0
    first_group_s: float | None = None
    """Seconds from the invocation's start (before its inputs are hashed and Ray starts) to the first
    group it wrote; None when it wrote none (everything was done, or it failed first)."""
    workers: int = 0
    worker_deaths: int = 0
    retries: int = 0
    """Units sent again after their worker died."""
    replacements: int = 0
    workers_lost: int = 0
    """Workers not replaced because the cluster had no room left (a node gone)."""
    events: list[str] = field(default_factory=list)
    """What the driver said about worker deaths, in order."""
    loads: list[dict[str, Any]] = field(default_factory=list)
    """Per worker and model it loaded: load time and peak memory (`cluster.provenance.measure_load`)."""

    def note(self, line: str) -> str:
        self.events.append(line)
        return line


def plan(suite: Suite, verified: Verification) -> tuple[list[Unit], int]:
    """The units still to do and the number of groups already complete on disk. A unit holds up to
    UNIT_BATCHES batches of prompts of one (model, task, group, batch size) with the same pending arms,
    in nearly equal chunks."""
    unit_decoder = UnitDecoder(suite)
    done = verified.done_arms()
    wanted = {(arm.proposer, arm.budget) for arm in unit_decoder.arms}  # an `auto` budget is AUTO in rows
    units, skipped = [], 0
    for model in suite.models:
        for task in suite.tasks:
            samples = unit_decoder.task(task).load(suite.split, limit=suite.limit)
            for batch_size in suite.batch_sizes:
                unit_prompts = max(UNIT_BATCHES * batch_size, PASSES_ONLY_UNIT if suite.passes_only else 0)
                for group in suite.groups(model):
                    by_arms: dict[tuple | None, list] = {}
                    for sample in samples:
                        key = {"model": model, "task": task, "sample_id": sample.sample_id, "batch_size": batch_size}
                        group_key = key | dict(zip(("temperature", "rule", "seed"), group))
                        pending = wanted - done.get(group_id(group_key), set())
                        if not pending:
                            skipped += 1
                            continue
                        by_arms.setdefault(None if pending == wanted else tuple(sorted(pending)), []).append(sample)
                    for arms, members in by_arms.items():
                        units += [
                            Unit(model, task, chunk, (group,), arms, batch_size)
                            for chunk in chunks(members, unit_prompts)
                        ]
    return units, skipped


def chunks(items: list, most: int) -> list[tuple]:
    """`items` in order, in the fewest chunks of at most `most`, their sizes differing by at most one."""
    count = -(-len(items) // most)
    size, extra = divmod(len(items), count) if count else (0, 0)
    out, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        out.append(tuple(items[start:end]))
        start = end
    return out


def split_sizes(suite: Suite) -> dict[str, int]:
    """Prompts in each task's split before the limit: with the limit, how many prompts a complete run
    holds per model and task (recorded in the manifest, checked by `harness.runs.verify`)."""
    from tasks.registry import get_task

    return {task: len(get_task(task, suite.num_fewshot).load(suite.split)) for task in suite.tasks}


def run_suite(
    suite: Suite,
    output: str | Path,
    address: str | None = None,
    progress: bool = True,
    on_write: Callable[[int], None] | None = None,
) -> RunResult:
    """Run (or resume, or extend) `suite` into `output`; `on_write(groups written so far)` after each group.

    Everything that can refuse the run (the output directory, its config and whether it can be written,
    each target's config, tokenizer and token ids, the Ray address and its authentication) is checked
    before Ray starts or the first byte is written, so bad input leaves no half-made run directory
    behind."""
    started = time.monotonic()
    check_targets(suite, local=not address)
    if address:
        check_address(address)
    else:
        resolve_device(suite.device)  # a local run's workers see this machine's devices
    inputs = run_inputs(suite)
    checked = RunDir.check(output, suite.config(), inputs)
    verified = checked.verify()
    units, skipped = plan(suite, verified)
    sizes = split_sizes(suite)
    stats = Stats(skipped=skipped)
    with quiet_stdout(), ray_session(address) if units else contextlib.nullcontext():  # nothing to decode: no Ray
        if units:
            import ray

            gpu_workers(suite, ray.cluster_resources().get("GPU", 0.0))  # refused before the run directory exists
        run_dir = RunDir.open(
            output,
            suite.config(),
            list(suite.seeds),
            hardware=driver_hardware(),
            inputs=inputs,
            command=list(sys.argv),
            verification=verified,
            split_sizes=sizes,
        )
        for damage in verified.damage:
            _say(
                f"spotbench: damaged: {damage.line()}; recomputing it (damaged files move to "
                f"{run_dir.path / 'damaged'})"
            )
        try:
            if units:
                _execute(suite, run_dir, units, progress, on_write, stats, started)
            summary = run_dir.write_summary()
        except BaseException as error:
            run_dir.end_session(
                "failed",
                f"{type(error).__name__}: {error}",
                duration_s=round(time.monotonic() - started, 1),
                **asdict(stats),
            )
            raise
    run_dir.end_session("complete", None, duration_s=round(time.monotonic() - started, 1), **asdict(stats))
    return RunResult(run_dir, summary, stats.written, stats.skipped, stats.workers, stats.first_group_s)


def _execute(
    suite: Suite,
    run_dir: RunDir,
    units: list[Unit],
    progress: bool,
    on_write: Callable[[int], None] | None,
    stats: Stats,
    started: float,
) -> None:
    import ray
    from tqdm import tqdm

    resources = ray.cluster_resources()
    cpus = max(1, int(resources.get("CPU", 1)))
    gpus = gpu_workers(suite, resources.get("GPU", 0.0))
    # each worker holds its GPU share or at least a CPU for its lifetime: more than fit would never start
    count = min(suite.workers or gpus or cpus, gpus or cpus, len(units))
    largest_node = max((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"]), default=1.0)
    threads = 1 if gpus else min(worker_threads(cpus, count), max(1, int(largest_node)))  # a worker fits one node
    run_dir.update_manifest(
        hardware=driver_hardware()
        | {
            "ray_nodes": len([n for n in ray.nodes() if n["Alive"]]),
            "ray_cpus": cpus,
            "ray_gpus": resources.get("GPU", 0.0),
            "workers": count,
            "threads_per_worker": threads,
            "gpus_per_worker": suite.gpus_per_worker if gpus else 0,
        }
    )
    options = {"num_gpus": suite.gpus_per_worker, "num_cpus": 1} if gpus else {"num_cpus": threads}
    worker_class = ray.remote(max_restarts=0, **options)(Worker)
    stats.workers = count
    groups = sum(len(unit.samples) * len(unit.groups) for unit in units)
    bar = tqdm(
        total=stats.skipped + groups,
        initial=stats.skipped,
        unit="group",
        desc="spotbench run",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    try:
        need = {"GPU": suite.gpus_per_worker, "CPU": 1.0} if gpus else {"CPU": float(threads)}  # as Ray counts
        Dispatcher(lambda: worker_class.remote(suite, threads), need, run_dir, bar, on_write, stats, started).run(
            units, count
        )
    finally:
        bar.close()


class Dispatcher:
    """Keeps every live worker busy with up to IN_FLIGHT_PER_WORKER units and writes what comes back.

    A dead worker's units are sent again; the worker is replaced when the cluster has room for one,
    else its slot is dropped and the live workers take its share; with none left the run stops."""

    def __init__(
        self,
        new_worker: Callable[[], Any],
        need: dict[str, float],
        run_dir: RunDir,
        bar: Any,
        on_write: Callable[[int], None] | None,
        stats: Stats,
        started: float,
    ):
        self.new_worker, self.need, self.run_dir, self.bar, self.on_write, self.stats = (
            new_worker,
            need,
            run_dir,
            bar,
            on_write,
            stats,
        )
        self.started = started
        """`time.monotonic()` when the invocation started, for `Stats.first_group_s`."""
        self.queue: deque[Unit] = deque()
        self.attempts: dict[Unit, int] = {}
        self.actors: dict[int, Any] = {}
        """Live workers by slot."""
        self.in_flight: dict[Any, tuple[int, Any, Unit]] = {}

    def run(self, units: list[Unit], count: int) -> None:
        import ray

        self.queue.extend(units)
        self.actors = {slot: self.new_worker() for slot in range(count)}
        try:
            self._feed_all()
            while self.in_flight:
                [ref], _ = ray.wait(list(self.in_flight), num_returns=1)
                self._collect(ref)
            self.stats.loads = self._loads()
        finally:  # free their CPUs now: a Ray instance kept by the caller may run again at once
            for actor in self.actors.values():
                ray.kill(actor, no_restart=True)

    def _loads(self) -> list[dict[str, Any]]:
        """What loading its models cost each live worker; a worker that died took its record along."""
        import ray
        from ray.exceptions import RayActorError

        refs = [actor.loads.remote() for actor in self.actors.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=LOADS_WAIT_S)
        loads = []
        for ref in ready:
            with contextlib.suppress(RayActorError):
                loads += ray.get(ref)
        return loads

    def _feed_all(self) -> None:
        """Round-robin: every worker gets a unit before any gets its second (units hold batches of
        prompts, so a run may have as few units as workers)."""
        for depth in range(1, IN_FLIGHT_PER_WORKER + 1):
            for slot in list(self.actors):
                busy = sum(1 for s, _, _ in self.in_flight.values() if s == slot)
                if self.queue and busy < depth:
                    unit = self.queue.popleft()
                    self.in_flight[self.actors[slot].decode.remote(unit)] = (slot, self.actors[slot], unit)

    def _collect(self, ref: Any) -> None:
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

        slot, actor, unit = self.in_flight.pop(ref)
        try:
            groups = ray.get(ref)
        except (RayActorError, ActorDiedError, ActorUnavailableError):
            self._worker_died(slot, actor, unit)
        except RayTaskError as error:
            if isinstance(error.cause, UserError):
                raise error.cause from None
            raise
        else:
            for rows in groups:
                if self.run_dir.write_group(rows):
                    self.stats.written += 1
                    if self.stats.first_group_s is None:
                        self.stats.first_group_s = round(time.monotonic() - self.started, 3)
                self.bar.update(1)
                if self.on_write:
                    self.on_write(self.stats.written)
        self._feed_all()

    def _worker_died(self, slot: int, actor: Any, unit: Unit) -> None:
        import ray

        self.attempts[unit] = self.attempts.get(unit, 0) + 1
        if self.attempts[unit] >= MAX_ATTEMPTS:
            raise RuntimeError(f"{unit.describe()}: its worker died {MAX_ATTEMPTS} times") from None
        self.queue.appendleft(unit)
        self.stats.retries += 1
        if slot not in self.actors or self.actors[slot] is not actor:  # a later unit of a death already handled
            return
        ray.kill(actor, no_restart=True)
        self.stats.worker_deaths += 1
        if room_for(self.need):
            self.actors[slot] = self.new_worker()
            self.stats.replacements += 1
            _say(self.stats.note("spotbench: a worker died; replaced it and re-sent its units"))
            return
        del self.actors[slot]
        self.stats.workers_lost += 1
        free = {k: round(v, 2) for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
        if not self.actors:
            raise ClusterLost(
                f"every worker was lost ({self.stats.worker_deaths} died, a node gone?) and the cluster has no room "
                f"for another (needs {self.need}, free {free}); {self.stats.written} groups of this session are "
                "written: bring the nodes back (or add one) and run the same command again to resume"
            )
        _say(
            self.stats.note(
                f"spotbench: a worker died and the cluster has no room for another (needs {self.need}, "
                f"free {free}; a node gone?): its units go to the {len(self.actors)} live workers"
            )
        )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

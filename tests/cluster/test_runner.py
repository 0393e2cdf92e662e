"""The Ray runner on one shared local Ray instance: rows exactly once, resume, a killed worker."""

import os
import signal
from collections import Counter

import pyarrow.parquet as pq
import pytest
import ray

from cluster.runner import run_suite
from cluster.suite import Suite
from cluster.workers import room_for
from harness.runs.schema import KEY_FIELDS

SUITE = Suite(
    models=("tiny-random:sdar",),
    proposers=("confidence", "oracle"),
    limit=3,
    temperatures=(0.0, 1.0),
    budgets=(0, 4),
    gen_length=16,
    block_length=8,
    workers=2,
    batch_sizes=(1,),
)  # units of 2 prompts: a run has units to spread, retry and resume


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # "local": a fresh instance even when RAY_ADDRESS or a `ray start` elsewhere on the machine says otherwise
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    yield
    ray.shutdown()


def keys(run_dir) -> Counter:
    return Counter(tuple(r[f] for f in KEY_FIELDS) for r in run_dir.read_rows().to_pylist())


def test_every_row_once_and_a_rerun_writes_nothing(tmp_path) -> None:
    result = run_suite(SUITE, tmp_path / "run", progress=False)
    counts = keys(result.run_dir)
    assert len(counts) == 3 * 2 * 2 * 2 and set(counts.values()) == {1}
    assert result.written == 6 and result.run_dir.manifest()["status"] == "complete"
    first_group_s = result.run_dir.manifest()["sessions"][-1]["first_group_s"]  # start to the first group written
    assert first_group_s == result.first_group_s and first_group_s >= 0
    loads = result.run_dir.manifest()["sessions"][-1]["loads"]  # each worker loaded the model once
    assert sorted(r["model"] for r in loads) == ["tiny-random:sdar"] * 2 and len({r["worker"] for r in loads}) == 2
    assert all(r["load_s"] > 0 and r["peak_memory_bytes"] > 0 and r["memory"] == "cpu_peak_rss" for r in loads)
    assert {r["n"] for r in result.summary.to_pylist()} == {3}
    rows = result.run_dir.read_rows().to_pylist()
    # the plain reference of a group is decoded once, on the worker that runs all of its arms
    by_group: dict[tuple[str, float], set[tuple[float, str]]] = {}
    for r in rows:
        by_group.setdefault((r["sample_id"], r["temperature"]), set()).add((r["plain_wall_s"], r["worker"]))
    assert all(len(v) == 1 for v in by_group.values())
    mtimes = {p: p.stat().st_mtime_ns for p in result.run_dir.samples_dir.iterdir()}
    again = run_suite(SUITE, tmp_path / "run", progress=False)
    assert (again.written, again.skipped) == (0, 6)
    sessions = again.run_dir.manifest()["sessions"]  # one record per session: this one wrote no group
    assert again.first_group_s is None and [s["first_group_s"] for s in sessions] == [first_group_s, None]
    assert {p: p.stat().st_mtime_ns for p in result.run_dir.samples_dir.iterdir()} == mtimes


@pytest.mark.slow
def test_a_damaged_group_is_named_and_decoded_again_on_resume(tmp_path, capsys) -> None:
    suite = Suite(**{**SUITE.__dict__, "limit": 2, "temperatures": (0.0,)})
    first = run_suite(suite, tmp_path / "run", progress=False)
    damaged = sorted(first.run_dir.samples_dir.glob("*.parquet"))[0]
    damaged.write_bytes(damaged.read_bytes()[:100])
    capsys.readouterr()
    again = run_suite(suite, tmp_path / "run", progress=False)
    assert (again.written, again.skipped) == (1, 1)
    err = capsys.readouterr().err
    assert f"damaged: samples/{damaged.name} (tiny-random:sdar/arith/test/" in err and "recomputing it" in err
    assert not again.run_dir.verify().damage and set(keys(again.run_dir).values()) == {1}
    assert (tmp_path / "run" / "damaged").is_dir()
    session = again.run_dir.manifest()["sessions"][-1]
    assert session["resumed"] and len(session["damaged"]) == 1 and session["written"] == 1


@pytest.mark.slow
def test_a_finished_run_is_extended_reusing_every_finished_group(tmp_path) -> None:
    small = Suite(**{**SUITE.__dict__, "proposers": ("confidence",), "budgets": (0,), "limit": 2})
    first = run_suite(small, tmp_path / "run", progress=False)
    before = {p.name: p.stat().st_mtime_ns for p in first.run_dir.samples_dir.iterdir()}
    original = {
        (r["sample_id"], r["temperature"]): r["plain_answer_ids"] for r in first.run_dir.read_rows().to_pylist()
    }
    bigger = Suite(**{**SUITE.__dict__, "proposers": ("confidence", "oracle"), "budgets": (0, 4), "limit": 3})
    result = run_suite(bigger, tmp_path / "run", progress=False)
    # 4 finished groups get a file with their 3 new arms, 2 new groups are decoded whole; nothing is rewritten
    assert (result.written, result.skipped) == (6, 0)
    assert {p.name: p.stat().st_mtime_ns for p in result.run_dir.samples_dir.iterdir() if p.name in before} == before
    counts = keys(result.run_dir)
    assert len(counts) == 3 * 2 * 2 * 2 and set(counts.values()) == {1}
    assert {r["n"] for r in result.summary.to_pylist()} == {3}
    for row in result.run_dir.read_rows().to_pylist():  # the reference decoded again is the same reference
        assert original.get((row["sample_id"], row["temperature"]), row["plain_answer_ids"]) == row["plain_answer_ids"]
    manifest = result.run_dir.manifest()
    assert manifest["config"] == bigger.config() and manifest["status"] == "complete"
    assert set(manifest["config_history"][0]["changes"]) == {"proposers", "budgets", "limit"}


def test_room_for_a_worker_reads_the_free_resources() -> None:
    assert room_for({"CPU": 1}, wait_s=5)
    assert not room_for({"CPU": 3}, wait_s=0.5)  # more than the instance has: never


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_every_row_lands_once(tmp_path) -> None:
    suite = Suite(**{**SUITE.__dict__, "limit": 6, "temperatures": (0.0,), "workers": 1})
    killed: list[int] = []

    def kill_the_worker(written: int) -> None:
        if killed:
            return
        [path] = list((tmp_path / "run" / "samples").glob("*.parquet"))
        pid = int(pq.read_table(path).column("worker")[0].as_py().rsplit(":", 1)[1])
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    result = run_suite(suite, tmp_path / "run", progress=False, on_write=kill_the_worker)
    counts = keys(result.run_dir)
    assert killed and len(counts) == 6 * 4 and set(counts.values()) == {1}
    workers = {r["worker"].rsplit(":", 1)[1] for r in result.run_dir.read_rows().to_pylist()}
    assert str(killed[0]) in workers and len(workers) == 2  # the replacement finished the run
    manifest = result.run_dir.manifest()
    assert manifest["status"] == "complete"
    assert {k: manifest["sessions"][-1][k] for k in ("worker_deaths", "replacements", "workers_lost")} == {
        "worker_deaths": 1,
        "replacements": 1,
        "workers_lost": 0,
    }
    assert manifest["sessions"][-1]["retries"] >= 1


@pytest.mark.slow
def test_more_workers_than_the_cluster_holds_are_capped(tmp_path) -> None:
    suite = Suite(**{**SUITE.__dict__, "limit": 4, "temperatures": (0.0,), "workers": 5})  # 2 units of 2 prompts
    result = run_suite(suite, tmp_path / "run", progress=False)
    assert result.workers == 2 and result.run_dir.manifest()["hardware"]["workers"] == 2
    assert len(keys(result.run_dir)) == 4 * 4

"""Several Ray nodes (ray.cluster_utils.Cluster: raylets on this machine): sharding, and losing a node."""

from collections import Counter

import pytest
import ray
from ray.cluster_utils import Cluster

from cluster.runner import ClusterLost, run_suite
from cluster.suite import Suite
from harness.runs.schema import KEY_FIELDS

pytestmark = pytest.mark.slow  # Ray clusters and processes: CI runs it, the fast lane skips it

SUITE = Suite(
    models=("tiny-random:llada",),
    proposers=("confidence",),
    limit=6,
    temperatures=(0.0,),
    budgets=(4,),
    gen_length=16,
    block_length=8,
    workers=2,
    batch_sizes=(1,),  # units of 2 prompts: 3 units to shard over the nodes
)


@pytest.fixture
def cluster():
    """A head node with `head_cpus` and the driver connected; tests add (and remove) worker nodes."""
    made = []

    def start(head_cpus: int) -> Cluster:
        made.append(Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "include_dashboard": False}))
        return made[-1]

    yield start
    ray.shutdown()
    for c in made:
        c.shutdown()


def connect(c: Cluster) -> None:
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)


def rows_once(result) -> bool:
    counts = Counter(tuple(r[f] for f in KEY_FIELDS) for r in result.run_dir.read_rows().to_pylist())
    return len(counts) == SUITE.limit and set(counts.values()) == {1}


def test_prompts_are_sharded_over_both_nodes(cluster, tmp_path) -> None:
    c = cluster(1)
    c.add_node(num_cpus=1)
    connect(c)
    result = run_suite(SUITE, tmp_path / "run", progress=False)
    rows = result.run_dir.read_rows().to_pylist()
    assert sorted(r["sample_id"] for r in rows) == sorted(f"test/{i}" for i in range(6))
    nodes = {r["worker"].split(":")[0] for r in rows}
    alive = {n["NodeID"][:12] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2 and nodes <= alive
    assert result.run_dir.manifest()["hardware"]["ray_nodes"] == 2


def test_a_lost_node_s_units_go_to_the_live_worker(cluster, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("cluster.runner.UNIT_BATCHES", 1)  # a unit per prompt: the lost node always holds one
    c = cluster(1)
    node = c.add_node(num_cpus=1)
    connect(c)
    lost: list[int] = []

    def lose_the_node(written: int) -> None:
        if not lost:
            c.remove_node(node)
            lost.append(written)

    # Before: the replacement actor waited for ever for the CPU the live worker holds.
    result = run_suite(SUITE, tmp_path / "run", progress=False, on_write=lose_the_node)
    assert lost and rows_once(result)
    session = result.run_dir.manifest()["sessions"][-1]
    assert (session["worker_deaths"], session["workers_lost"], session["replacements"]) == (1, 1, 0)
    assert "no room for another" in capsys.readouterr().err and "no room" in session["events"][0]


def test_losing_every_worker_stops_with_one_line_and_the_run_resumes(cluster, tmp_path) -> None:
    c = cluster(0)  # the head runs no worker: the one worker lives on the node that is lost
    node = c.add_node(num_cpus=1)
    connect(c)
    suite = Suite(**{**SUITE.__dict__, "workers": 1})

    def lose_the_node(written: int) -> None:
        if written == 1:
            c.remove_node(node)

    with pytest.raises(ClusterLost, match=r"every worker was lost .* run the same command again to resume"):
        run_suite(suite, tmp_path / "run", progress=False, on_write=lose_the_node)
    manifest = tmp_path / "run" / "manifest.json"
    assert '"status": "failed"' in manifest.read_text()
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    result = run_suite(suite, tmp_path / "run", progress=False)
    assert result.skipped >= 1 and result.written == SUITE.limit - result.skipped and rows_once(result)


def test_a_worker_never_asks_for_more_cpus_than_one_node_has(cluster, tmp_path) -> None:
    """One unit (6 prompts at batch 8) on two 1-CPU nodes: one worker, and its threads must fit a node
    (2 threads would be an actor Ray can never place, and the run would wait forever)."""
    c = cluster(1)
    c.add_node(num_cpus=1)
    connect(c)
    result = run_suite(Suite(**{**SUITE.__dict__, "batch_sizes": (8,)}), tmp_path / "run", progress=False)
    assert rows_once(result) and result.run_dir.manifest()["hardware"]["threads_per_worker"] == 1

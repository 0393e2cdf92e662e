"""Sharding across two Ray nodes (ray.cluster_utils.Cluster: two raylets on this machine)."""

import pytest
import ray
from ray.cluster_utils import Cluster

from cluster.runner import run_suite
from cluster.suite import Suite

pytestmark = pytest.mark.slow  # Ray clusters and processes: CI runs it, the fast lane skips it


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_prompts_are_sharded_over_both_nodes(two_nodes, tmp_path) -> None:
    suite = Suite(models=("tiny-random:llada",), proposers=("confidence",), limit=6, temperatures=(0.0,),
                  budgets=(4,), gen_length=16, block_length=8, workers=2)
    result = run_suite(suite, tmp_path / "run", progress=False)
    rows = result.run_dir.read_rows().to_pylist()
    assert sorted(r["sample_id"] for r in rows) == sorted(f"test/{i}" for i in range(6))
    nodes = {r["worker"].split(":")[0] for r in rows}
    alive = {n["NodeID"][:12] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2 and nodes <= alive
    assert result.run_dir.manifest()["hardware"]["ray_nodes"] == 2

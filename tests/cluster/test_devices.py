"""Where workers decode and with which budget: GPU workers as the cluster's GPUs hold them (fractions
share a GPU), CPU workers when asked or when there is no GPU, a device the cluster cannot give refused
in one line before anything is written, and `auto` budgets chosen per worker by measured latency."""

from __future__ import annotations

import pytest
import torch

from cluster.suite import build_suite
from cluster.workers import gpu_workers
from harness.errors import UserError
from spotbench.cli import main


def suite(**flags):
    return build_suite({}, {"models": ["tiny-random:sdar"], **flags})


def test_gpu_workers_follow_the_gpus_and_their_share() -> None:
    assert gpu_workers(suite(), 4.0) == 4 and gpu_workers(suite(gpus_per_worker="0.5"), 2.0) == 4
    assert gpu_workers(suite(gpus_per_worker="0.3"), 1.0) == 3
    assert gpu_workers(suite(), 0.0) == 0  # auto without a GPU: CPU workers
    assert gpu_workers(suite(device="cpu"), 8.0) == 0  # asked for the CPU on a GPU cluster


def test_a_device_the_cluster_cannot_give_is_refused() -> None:
    with pytest.raises(UserError, match="--device cuda, but the Ray cluster has no GPU"):
        gpu_workers(suite(device="cuda"), 0.0)
    with pytest.raises(UserError, match="--gpus-per-worker 2 is more than the cluster's 1 GPU"):
        gpu_workers(suite(gpus_per_worker="2"), 1.0)


def test_device_and_dtype_are_part_of_the_config_and_the_gpu_share_is_not() -> None:
    config = suite(device="cpu", dtype="float64", gpus_per_worker="0.5").config()
    assert (config["device"], config["dtype"]) == ("cpu", "float64") and "gpus_per_worker" not in config


def test_a_local_run_on_a_missing_gpu_writes_nothing(tmp_path, capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "run"
    assert main(["run", "--models", "tiny-random:sdar", "--device", "cuda", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU is visible" in err and err.count("\n") == 1 and not out.exists()


def test_an_auto_budget_is_chosen_per_worker_and_recorded() -> None:
    from cluster.unit_decoder import Unit, UnitDecoder
    from harness.budget import CANDIDATES
    from tasks.registry import get_task

    suite = build_suite(
        {},
        {
            "models": ["tiny-random:llada"],
            "proposers": ["oracle", "confidence"],
            "budgets": "2,auto",
            "limit": "1",
            "temperatures": "1",
            "gen_length": "16",
            "block_length": "8",
        },
    )
    unit_decoder = UnitDecoder(suite)
    sample = get_task("arith").load("test", limit=1)[0]
    [rows] = unit_decoder.decode(Unit("tiny-random:llada", "arith", (sample,), tuple(suite.groups())))
    auto = [r for r in rows if r.budget == -1]
    assert len(auto) == 2
    assert all(r.chosen_budget in CANDIDATES and (r.predicted_speedup_wall or 0) > 0 for r in auto)
    assert all(r.exact for r in rows)
    fixed = [r for r in rows if r.budget == 2]
    assert all(r.chosen_budget == 2 and r.predicted_speedup_wall is None for r in fixed)
    again = unit_decoder.decode(Unit("tiny-random:llada", "arith", (sample,), tuple(suite.groups())))[0]
    assert [r.chosen_budget for r in again] == [r.chosen_budget for r in rows]  # chosen once per worker


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"budgets": "auto", "tasks": "humaneval"}, "task 'humaneval' has none"),
        (
            {"budgets": "auto", "models": "tiny-random-ar", "proposers": "oracle"},
            "budgets auto is for diffusion targets",
        ),
        ({"budgets": "auto,x"}, "must be a whole number >= 0 or auto"),
    ],
)
def test_auto_budgets_need_a_train_split_and_a_diffusion_target(flags, message) -> None:
    with pytest.raises(UserError, match=message):
        build_suite({}, {"models": ["tiny-random:sdar"], **flags})

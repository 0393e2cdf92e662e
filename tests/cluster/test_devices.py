"""Where workers decode: GPU workers as the cluster's GPUs hold them (fractions share a GPU), CPU
workers when asked or when there is no GPU, and a device the cluster cannot give refused in one line
before anything is written."""

from __future__ import annotations

import pytest
import torch

from cluster.runner import gpu_workers
from cluster.suite import build_suite
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

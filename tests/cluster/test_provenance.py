"""What loading a model cost a worker: time and peak memory, as the manifest records them."""

import time

import torch

from cluster.provenance import measure_load
from harness.targets.registry import load_target


def test_a_load_records_its_time_and_a_peak_that_holds_the_weights() -> None:
    def load():
        time.sleep(0.05)  # the measured time is the load's, however fast the checkpoint reads
        return load_target("tiny-random:sdar", dtype="float64")

    target, cost = measure_load(load, "tiny-random:sdar")
    weights = sum(p.numel() * p.element_size() for p in target.model.parameters())
    assert cost["model"] == "tiny-random:sdar" and cost["device"] == "cpu" and cost["dtype"] == "float64"
    assert cost["load_s"] >= 0.05 and cost["memory"] == "cpu_peak_rss"
    assert cost["peak_memory_bytes"] >= weights > 0
    assert target.dtype == torch.float64

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


def test_every_checkpoint_a_run_reads_is_hashed_into_its_inputs(tmp_path) -> None:
    """Targets (zoo, folders) and proposer folders are hashed; retrained weights under the same name are
    an input difference the gate and a resume refuse, a training report beside them is not."""
    import shutil

    from cluster.provenance import run_inputs
    from cluster.suite import Suite
    from harness.runs.configs import result_differences
    from harness.targets.zoo import model_dir

    inputs = run_inputs(Suite())
    assert set(inputs["checkpoints"]) == {"sdar-a", "spot"}  # the default: its zoo target and SPOT checkpoint
    many = run_inputs(
        Suite(
            models=("dream-a", "tiny-random:sdar"),
            proposers=("confidence", "spiffy:spiffy-dream-a", "spot-sets", "spot:spot-sdar-a-grid"),
        )
    )
    assert set(many["checkpoints"]) == {"dream-a", "spiffy:spiffy-dream-a", "spot-sets", "spot:spot-sdar-a-grid"}
    assert set(run_inputs(Suite(models=("ar-a",), proposers=("draft-model:ar-a-draft",)))["checkpoints"]) == {
        "ar-a",
        "draft-model:ar-a-draft",
    }

    folder = tmp_path / "target"
    shutil.copytree(model_dir("sdar-a"), folder)
    suite = Suite(models=(str(folder),), proposers=("confidence",))
    before = run_inputs(suite)
    (folder / "training.json").write_text("{}")  # not read by loading: no difference
    assert run_inputs(suite) == before
    weights = bytearray((folder / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # "retrained": other weights under the same name
    (folder / "model.safetensors").write_bytes(bytes(weights))
    after = run_inputs(suite)
    [difference] = result_differences({"inputs": after}, {"inputs": before})
    assert difference.startswith(f"checkpoint {folder} (sha256 ")


def test_a_second_start_reads_no_unchanged_checkpoint(tmp_path, monkeypatch) -> None:
    """The inputs' hashes come from the cache while their files are unchanged (`harness.hash_cache`),
    and are the same as read afresh."""
    from cluster.provenance import run_inputs
    from cluster.suite import Suite
    from harness import hash_cache
    from harness.runs import files

    monkeypatch.setenv("SPOTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(hash_cache, "RACY_S", 0.0)  # a checkout made moments ago counts as old
    reads = []
    hash_file = files.sha256_file

    def counting(path):
        reads.append(path)
        return hash_file(path)

    monkeypatch.setattr(files, "sha256_file", counting)
    first = run_inputs(Suite())
    assert reads  # the zoo's sdar-a and spot files, read once
    reads.clear()
    assert run_inputs(Suite()) == first and reads == []

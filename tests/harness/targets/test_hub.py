"""Hub ids read from a hub cache laid out on disk as `huggingface_hub` lays it out (no network):
`models--ORG--NAME/blobs/<sha256>`, `snapshots/<commit>/<file>` linking to the blobs, `refs/main`."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch

from cluster.provenance import checkpoint_files, files_sha256, proposer_files, run_inputs
from cluster.suite import Suite
from harness.bundled import ZOO_DIR
from harness.decoding import DecodeConfig, parse_rule, plain_decode
from harness.errors import UserError
from harness.targets.hub import safetensors_size, snapshot
from harness.targets.registry import load_dlm_target
from proposers.psi.family import parse_psi
from proposers.spot.family import spot_folder
from proposers.spot_sets.family import spot_sets_folder
from spotbench.cli import main

COMMIT = "0123456789abcdef0123456789abcdef01234567"
PROMPT = [72, 105, 33, 10, 5, 9]


def lay_out(cache: Path, repo_id: str, folder: Path, commit: str = COMMIT) -> Path:
    """`folder`'s files as one commit of `repo_id` in `cache`, with `refs/main` at it; the snapshot."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        blob = hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, repo / "blobs" / blob)
        link = snap / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / blob, link.parent))
    return snap


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline hub cache in tmp_path/hf, run from an empty working directory."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path / "hf"


def decoded(name: str):
    target = load_dlm_target(name, dtype="float64")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, 0.0, 0)
    return target, plain_decode(target, PROMPT, config, keep_logits=True)


@pytest.mark.parametrize("family", ["llada", "dream", "sdar", "llada2"])
def test_a_hub_id_loads_and_decodes_exactly_as_its_folder(family, hub, tmp_path, reference) -> None:
    reference.write_published(family, tmp_path / "ck", shards=3 if family == "llada2" else 1)
    snap = lay_out(hub, f"org/tiny-{family}", tmp_path / "ck")
    by_path, plain = decoded(str(tmp_path / "ck"))
    for name in (f"org/tiny-{family}", f"org/tiny-{family}@main", f"org/tiny-{family}@{COMMIT}"):
        by_id, generation = decoded(name)
        assert by_id.name == name and snapshot(name).folder == snap and snapshot(name).commit == COMMIT
        weights = by_id.model.state_dict()
        assert all(torch.equal(weights[k], v) for k, v in by_path.model.state_dict().items())
        assert generation.answer_ids == plain.answer_ids and len(generation.pass_logits) == len(plain.pass_logits)
        assert all(torch.equal(a, b) for a, b in zip(generation.pass_logits, plain.pass_logits))
    # negative control: another seed's weights under another id decode differently
    reference.write_published(family, tmp_path / "other", seed=1, shards=3 if family == "llada2" else 1)
    lay_out(hub, f"org/other-{family}", tmp_path / "other")
    other = decoded(f"org/other-{family}")[1]
    assert not all(torch.equal(a, b) for a, b in zip(other.pass_logits, plain.pass_logits))


def test_a_run_records_the_commit_and_files_and_hashes_them_as_a_folder(hub, tmp_path, reference) -> None:
    reference.write_published("sdar", tmp_path / "ck")
    lay_out(hub, "org/tiny-sdar", tmp_path / "ck")
    lay_out(hub, "org/spot", ZOO_DIR / "proposers" / "spot-sdar-a")
    inputs = run_inputs(Suite(models=("org/tiny-sdar",), proposers=("confidence", "spot:org/spot")))
    assert inputs["checkpoints"]["org/tiny-sdar"] == files_sha256(checkpoint_files(tmp_path / "ck"))
    assert inputs["checkpoints"]["spot:org/spot"] == files_sha256(proposer_files("spot:spot-sdar-a"))
    files = ", ".join(sorted(p.name for p in (tmp_path / "ck").iterdir()))
    assert inputs["hub"] == {
        "org/tiny-sdar": f"org/tiny-sdar@{COMMIT}: {files}",
        "spot:org/spot": f"org/spot@{COMMIT}: spot.json, spot.safetensors",
    }
    assert run_inputs(Suite(models=("sdar-a",)))["hub"] == {}


def test_proposer_and_drafter_checkpoints_take_hub_ids(hub) -> None:
    spot = lay_out(hub, "org/spot", ZOO_DIR / "proposers" / "spot-sdar-a")
    drafter = lay_out(hub, "org/psi", ZOO_DIR / "drafters" / "psi-ar-a")
    assert spot_folder("org/spot") == spot.resolve()
    assert parse_psi("psi-tree", "org/psi:K=2").folder == drafter
    # a committed folder of that spelling wins (spot-sets-calibrated/sdar-b is in the zoo, not the cache)
    assert spot_sets_folder("spot-sets-calibrated/sdar-b").is_relative_to(ZOO_DIR)


def test_a_local_folder_wins_over_a_hub_id_of_the_same_spelling(hub, tmp_path, reference) -> None:
    reference.write_published("sdar", tmp_path / "ck")
    lay_out(hub, "org/tiny-sdar", tmp_path / "ck")
    reference.write_published("sdar", Path("org/tiny-sdar"), seed=1)  # in the working directory
    local = load_dlm_target("org/tiny-sdar", dtype="float64").model.state_dict()
    other = load_dlm_target(str(tmp_path / "work" / "org" / "tiny-sdar"), dtype="float64").model.state_dict()
    cached = load_dlm_target(str(tmp_path / "ck"), dtype="float64").model.state_dict()
    assert all(torch.equal(local[k], other[k]) for k in local)
    assert not all(torch.equal(local[k], cached[k]) for k in local)


def break_blob(snap: Path, name: str, how: str) -> None:
    blob = (snap / name).resolve()
    if how == "delete":
        blob.unlink()
    else:
        blob.write_bytes(blob.read_bytes()[:-100])


BAD = {
    "not cached offline": ("org/absent", "org/absent is not in the hub cache", "the cache has no revision of it"),
    "unknown revision": ("org/tiny-llada2@v2", "org/tiny-llada2@v2 is not in the hub cache", "revisions main, 0123"),
    "missing shard": ("org/tiny-llada2", "model-00002-of-00003.safetensors is missing", "--force-download"),
    "truncated shard": ("org/tiny-llada2", "model-00003-of-00003.safetensors is truncated", "--force-download"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_hub_input_is_one_line_exit_2_and_nothing_written(case, hub, tmp_path, reference, capsys) -> None:
    reference.write_published("llada2", tmp_path / "ck", shards=3)
    snap = lay_out(hub, "org/tiny-llada2", tmp_path / "ck")
    if case == "missing shard":
        break_blob(snap, "model-00002-of-00003.safetensors", "delete")
    if case == "truncated shard":
        break_blob(snap, "model-00003-of-00003.safetensors", "truncate")
    name, *expected = BAD[case]
    with pytest.raises(UserError) as error:
        snapshot(name)
    assert all(part in str(error.value) for part in expected) and "\n" not in str(error.value), error.value
    capsys.readouterr()
    assert main(["run", "--models", name, "--limit", "1", "-o", "out", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected[0] in err and "Traceback" not in err
    assert not Path("out").exists() and not Path("runs").exists()


def test_the_safetensors_size_check_reads_the_header(tmp_path, reference) -> None:
    reference.write_published("sdar", tmp_path)
    file = tmp_path / "model.safetensors"
    assert safetensors_size(file) == file.stat().st_size
    file.write_bytes(file.read_bytes()[:4])
    assert safetensors_size(file) is None

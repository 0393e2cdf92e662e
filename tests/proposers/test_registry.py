"""The registry is a list of the method packages' families: every family's checkpoint files are an input
of a run (`cluster.provenance`), so a retrained checkpoint under the same name is seen by resume and gate."""

import dataclasses
import shutil
from pathlib import Path

import pytest

from cluster.provenance import run_inputs
from cluster.suite import Suite
from harness.bundled import ZOO_DIR
from proposers import registry
from proposers.family import no_files

EXAMPLES = {
    "spiffy": (ZOO_DIR / "proposers" / "spiffy-sdar-a", "{}"),
    "spot": (ZOO_DIR / "proposers" / "spot-sdar-a", "{}"),
    "spot-sets": (ZOO_DIR / "proposers" / "spot-sets-calibrated" / "dream-a", "{}"),
    "psi-linear": (ZOO_DIR / "drafters" / "psi-ar-a", "{}:B=3"),
    "psi-tree": (ZOO_DIR / "drafters" / "psi-ar-a", "{}:K=2"),
}
"""A checkpoint folder of every family that reads one, and its spec with `{}` for the folder."""


@pytest.fixture(autouse=True)
def own_hash_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPOTBENCH_CACHE_DIR", str(tmp_path / "cache"))


def unseen_changes(name: str, tmp_path: Path) -> list[str]:
    """The files of family `name`'s example checkpoint (copied to tmp_path) whose change a run's inputs
    do not see: each file in turn gets one more byte, and the spec's recorded hash must change."""
    source, pattern = EXAMPLES[name]
    folder = tmp_path / name
    shutil.copytree(source, folder)
    spec = f"{name}:{pattern.format(folder)}"
    suite = Suite(models=("tiny-random:sdar",), proposers=(spec,), tasks=("arith",))
    before = run_inputs(suite)["checkpoints"].get(spec)
    unseen = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        original = path.read_bytes()
        path.write_bytes(original + b" ")  # JSON stays valid; weights are hashed, not loaded
        after = run_inputs(suite)["checkpoints"].get(spec)
        path.write_bytes(original)
        if before is None or after == before:
            unseen.append(path.name)
    return unseen


def test_every_family_that_reads_a_checkpoint_has_an_example_here() -> None:
    """A new learned family must come with its example, so the check below covers it."""
    learned = {family.name for family in registry.FAMILIES if family.kind == "learned"}
    assert learned <= set(EXAMPLES) and set(EXAMPLES) <= set(registry.PROPOSERS)
    assert [family.name for family in registry.FAMILIES] == list(registry.PROPOSERS)  # no name twice


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_file_of_a_familys_checkpoint_is_hashed_into_a_runs_inputs(name, tmp_path) -> None:
    assert unseen_changes(name, tmp_path) == []


def test_a_family_that_forgets_its_checkpoint_or_part_of_it_is_caught(tmp_path, monkeypatch) -> None:
    """Negative control: the same check over a `spot` whose `files` names nothing, then only its JSON."""
    spot = registry.PROPOSERS["spot"]
    monkeypatch.setitem(registry.PROPOSERS, "spot", dataclasses.replace(spot, files=no_files))
    assert unseen_changes("spot", tmp_path / "none") == ["spot.json", "spot.safetensors"]

    def json_only(argument: str | None) -> list[Path]:
        return [path for path in spot.files(argument) if path.suffix == ".json"]

    only_json = dataclasses.replace(spot, files=json_only)
    monkeypatch.setitem(registry.PROPOSERS, "spot", only_json)
    assert unseen_changes("spot", tmp_path / "json") == ["spot.safetensors"]


def test_a_draft_models_weights_are_hashed_as_a_target_is() -> None:
    files, models = registry.proposer_inputs("draft-model:ar-a-draft")
    assert files == [] and models == ("ar-a-draft",)
    assert registry.proposer_inputs("confidence") == ([], ())

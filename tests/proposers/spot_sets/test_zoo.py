"""The committed SPOT-Sets checkpoint: the registry's `spot-sets`, rebuilt by its committed recipe,
exact on its target and drafting sets the target accepts; its committed calibrations for the other
zoo targets (zoo/proposers/spot-sets-calibrated/<target>)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cluster.suite import build_suite, load_suite
from harness.decoding import DecodeConfig, parse_rule, plain_decode, speculative_decode
from harness.errors import UserError
from harness.recipes import nested_layout
from harness.targets.registry import default_block_length, load_target
from harness.targets.zoo import zoo_names
from proposers import build_proposer, check_arm_for_model, check_proposer
from proposers.spot.recipe import OPTIMIZER
from proposers.spot_sets.network import CONFIG_FILE, DEFAULT_CHECKPOINT, WEIGHTS_FILE, read_calibration, read_meta
from proposers.spot_sets.training import SpotSetsRecipe

ZOO_PROPOSERS = Path(__file__).resolve().parents[3] / "zoo" / "proposers"


def test_registry_spot_sets_is_the_zoo_checkpoint_trained_on_sdar_a_at_tau_0_9():
    arm = check_proposer("spot-sets")
    assert (arm.kind, arm.trained_on) == ("learned", "sdar-a")
    meta = read_meta(ZOO_PROPOSERS / DEFAULT_CHECKPOINT)
    assert (meta["provenance"]["rule"], meta["provenance"]["tau"]) == ("threshold:0.9", 0.9)
    assert meta["provenance"]["data"] == ["arith/train", "gsm8k/train"]
    assert build_proposer("spot-sets", None, None).calibration is None


def test_every_committed_spot_sets_checkpoint_is_its_committed_recipes():
    recipes = {}
    for path in sorted(ZOO_PROPOSERS.rglob("*.yaml")):
        if "rule" in path.read_text():
            recipe = SpotSetsRecipe.load(path)
            recipes[recipe.name] = json.loads(json.dumps(dataclasses.asdict(recipe)))
            assert recipe.init_checkpoint is None or (ZOO_PROPOSERS.parents[1] / recipe.init_checkpoint).is_dir()
    folders = sorted(meta.parent for meta in ZOO_PROPOSERS.rglob(CONFIG_FILE))
    assert folders
    for folder in folders:
        # recorded in the flat layout of before the optimizer block; fields added since are at their defaults
        recorded = nested_layout(read_meta(folder)["recipe"])
        committed = recipes[recorded["name"]]
        optimizer = {k: committed["optimizer"][k] for k in recorded["optimizer"]}
        assert {k: committed.get(k) for k in recorded} | {"optimizer": optimizer} == recorded, folder
        fields = {k: committed[k] for k in recorded} | {
            "optimizer": dataclasses.replace(OPTIMIZER, **recorded["optimizer"])
        }
        defaults = json.loads(json.dumps(dataclasses.asdict(SpotSetsRecipe(**fields))))
        assert committed == defaults, folder
        assert [point["step"] for point in read_meta(folder)["curve"]][-1] == recorded["optimizer"]["steps"]


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_zoo_spot_sets_is_exact_on_sdar_a_and_saves_passes(temperature):
    target = load_target("sdar-a").exact()
    cfg = DecodeConfig(parse_rule("threshold:0.9", target.family, target.mask_id), 64, 32, temperature, 3)
    prompt = target.tokenizer.encode("Question: What is 17 + 25?\nAnswer:", add_special_tokens=False)
    reference = plain_decode(target, prompt, cfg)
    spec = speculative_decode(target, prompt, build_proposer("spot-sets", target, reference), cfg, 8)
    assert spec.steps == reference.steps and torch.equal(spec.tokens, reference.tokens)
    # how it compares with the confidence set is a measured table over many prompts (docs/spot_sets.md),
    # not a property of one prompt
    assert spec.metrics.nfe < reference.metrics.nfe


def test_committed_calibrations_are_the_zoo_checkpoint_fitted_to_their_target_on_train_prompts():
    folders = sorted((ZOO_PROPOSERS / "spot-sets-calibrated").iterdir())
    assert folders
    weights = (ZOO_PROPOSERS / DEFAULT_CHECKPOINT / WEIGHTS_FILE).read_bytes()
    for folder in folders:
        provenance = read_calibration(folder)["provenance"]
        assert provenance["target"] == folder.name in zoo_names() and folder.name != "sdar-a"
        block = default_block_length(folder.name)  # each target at the block length it was trained at
        assert (provenance["rule"], provenance["tau"], provenance["block_length"]) == ("threshold:0.9", 0.9, block)
        assert 0 < len(provenance["prompts"]) <= 50 and all("/train/" in p for p in provenance["prompts"])
        assert (folder / WEIGHTS_FILE).read_bytes() == weights  # calibrated, not retrained
        check_arm_for_model(f"spot-sets:{folder}", folder.name, block, ["threshold:0.9"])
        with pytest.raises(UserError, match=f"calibrated for model '{folder.name}', not 'sdar-a'"):
            check_arm_for_model(f"spot-sets:{folder}", "sdar-a", block, ["threshold:0.9"])


@pytest.mark.parametrize(
    "path", sorted((ZOO_PROPOSERS.parents[1] / "suites" / "threshold-table").glob("*.yaml")), ids=lambda p: p.stem
)
def test_threshold_table_suites_run_each_target_with_its_own_fitted_proposers(path):
    """Each suite is valid as a run checks it (every Spiffy graph and SPOT-Sets calibration fits its
    model, block length and rule), and pairs the learned proposer of its rule with both baselines."""
    suite = build_suite(load_suite(path), {})
    [model], [rule] = suite.models, suite.rules
    assert path.stem == f"{model}-{'top1' if rule == 'top1' else 'threshold'}"
    learned = "spot" if rule == "top1" else "spot-sets"
    assert [p.partition(":")[0] for p in suite.proposers] == ["confidence", "spiffy", learned]
    assert suite.limit >= 40 and suite.split == "test" and set(suite.budgets) == {2, 4, 8, 16}

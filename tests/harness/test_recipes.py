"""Recipes embed one optimizer block (`harness.recipes.Optimizer`): a file names what differs from its
recipe class's defaults, and a recipe recorded in the flat layout of before the block (the JSON of a
committed checkpoint) is still read as the same recipe."""

import dataclasses
import json
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.recipes import nested_layout
from harness.targets.zoo import ZOO_DIR
from harness.training.loop import same_recipe
from proposers.spot.recipe import OPTIMIZER, SpotRecipe

CHECKPOINT = ZOO_DIR / "proposers" / "spot-sdar-a"


def test_a_committed_checkpoints_flat_recipe_is_its_committed_recipe() -> None:
    recorded = json.loads((CHECKPOINT / "spot.json").read_text())["recipe"]
    assert "steps" in recorded and "optimizer" not in recorded  # recorded before the block
    recorded["temperatures"] = tuple(recorded["temperatures"])  # as a training state keeps it (not JSON)
    recipe = SpotRecipe.load(ZOO_DIR / "proposers" / "spot-sdar-a.yaml")
    assert same_recipe(recorded, recipe)
    assert nested_layout(recorded)["optimizer"] == {
        k: v for k, v in dataclasses.asdict(recipe.optimizer).items() if k != "grad_clip"
    }
    # negative controls: another learning rate, flat or nested, is another recipe
    assert not same_recipe(recorded | {"learning_rate": 0.002}, recipe)
    nested = nested_layout(recorded)
    assert same_recipe(nested, recipe)
    assert not same_recipe(nested | {"optimizer": nested["optimizer"] | {"steps": 9}}, recipe)


def test_a_block_names_only_what_differs_and_flags_reach_it(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("name: t\ntarget: sdar-a\ntasks: {arith: 2}\noptimizer: {steps: 7, learning_rate: 0.01}\n")
    recipe = SpotRecipe.load(path)
    assert recipe.optimizer == dataclasses.replace(OPTIMIZER, steps=7, learning_rate=0.01)
    from harness.recipes import load_recipe

    assert load_recipe(SpotRecipe, path, {"steps": 3}).optimizer.steps == 3


@pytest.mark.parametrize(
    "lines, message",
    [
        ("steps: 10", "steps is a setting of the optimizer block; write it as optimizer: {{steps: ...}}"),
        ("optimizer: 10", "optimizer must be a mapping of settings"),
        ("optimizer: {steps: 0}", "recipe {path}: optimizer: steps must be a whole number >= 1, got 0"),
        ("optimizer: {stepz: 3}", "recipe {path}: optimizer: stepz is an unknown setting"),
    ],
)
def test_a_bad_optimizer_setting_is_one_line_naming_it(tmp_path: Path, lines: str, message: str) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(f"name: t\ntarget: sdar-a\ntasks: {{arith: 2}}\n{lines}\n")
    with pytest.raises(UserError) as error:
        SpotRecipe.load(path)
    assert message.format(path=path) in str(error.value) and "\n" not in str(error.value)

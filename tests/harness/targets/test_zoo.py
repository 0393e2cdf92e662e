"""The committed zoo: every model loads like a real checkpoint, fits the size limit, has a recipe."""

import json

import pytest
import yaml

from harness.targets.ar import ARTarget
from harness.targets.registry import load_target
from harness.targets.zoo import PROJECT_ROOT, zoo_entry, zoo_names
from spotbench.cli import main

MAX_BYTES = 20 * 2**20


def test_the_zoo_has_models() -> None:
    assert "llada-a" in zoo_names()


@pytest.mark.parametrize("name", zoo_names())
def test_zoo_model_loads_and_matches_its_recipe(name: str) -> None:
    entry = zoo_entry(name)
    recipe = yaml.safe_load((PROJECT_ROOT / entry.recipe).read_text())
    target = load_target(name)
    assert target.name == name and entry.size_bytes <= MAX_BYTES
    assert entry.parameters == sum(p.numel() for p in target.model.parameters())
    if isinstance(target, ARTarget):  # a causal LM: no commit-rule family, no mask token
        assert recipe["family"] == entry.family == "ar"
    elif entry.family == "converted":  # a delta over an AR base: its mask id is the recipe's, not the tokenizer's
        assert target.family.name == "converted" and target.mask_id == recipe["mask_id"]
    else:
        assert target.family.name == recipe["family"] == entry.family
        assert target.tokenizer.mask_token_id == target.mask_id
    assert target.tokenizer.decode(target.tokenizer.encode("Question: 2 + 3?")) == "Question: 2 + 3?"


def test_zoo_command_lists_every_model(capsys) -> None:
    assert main(["zoo", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in rows] == zoo_names()
    assert all(r["heldout_loss"] > 0 and r["training_tokens"] > 0 for r in rows)

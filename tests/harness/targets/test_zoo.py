"""The committed zoo: every model loads like a real checkpoint, fits the size limit, has a recipe."""

import json
import re

import pytest
import yaml

from cluster.suite import Suite
from harness.bundled import ZOO_DIR
from harness.targets.ar import ARTarget
from harness.targets.registry import load_target
from harness.targets.zoo import zoo_entry, zoo_names
from spotbench.cli import main

MAX_BYTES = 20 * 2**20


def test_every_model_the_readme_lists_and_the_default_target_are_finished_zoo_models() -> None:
    """The tests below run over zoo_names(): a model whose folder or training.json went missing would
    drop out of them silently. zoo/README.md's table and `spotbench run`'s default target name it."""
    table = (ZOO_DIR / "README.md").read_text().split("## Rebuild")[0]
    listed = set(re.findall(r"^\| ([\w-]+) \|", table, re.MULTILINE)) - {"name"}
    assert Suite().models and set(Suite().models) <= listed
    assert sorted(listed - set(zoo_names())) == []
    assert [name for name in sorted(listed) if not zoo_entry(name).finished] == []


@pytest.mark.parametrize("name", zoo_names())
def test_zoo_model_loads_and_matches_its_recipe(name: str) -> None:
    entry = zoo_entry(name)
    recipe = yaml.safe_load((ZOO_DIR.parent / entry.recipe).read_text())
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

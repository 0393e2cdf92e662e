"""`spotbench train-proposer`: the checkpoint and its report; user mistakes are one-line errors that
write nothing."""

from __future__ import annotations

import json

import pytest

from proposers.spot.network import CONFIG_FILE, WEIGHTS_FILE
from spotbench.cli import main

RECIPE = """name: t
target: tiny-random:sdar
tasks: {arith: 2}
temperatures: [0.0]
gen_length: 16
block_length: 8
optimizer: {steps: 2, batch_size: 8, warmup_steps: 1}
validation_fraction: 0.5
model: {width: 16, layers: 1, heads: 2, ffn: 32}
"""


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE)
    return path


def test_train_proposer_writes_the_checkpoint_and_prints_its_report(recipe, tmp_path, capsys):
    assert main(["train-proposer", str(recipe), "--out", str(tmp_path / "out")]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["steps"] == 2 and report["provenance"]["target"] == "tiny-random:sdar"
    assert (tmp_path / "out" / WEIGHTS_FILE).exists() and (tmp_path / "out" / CONFIG_FILE).exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--workers", "0"], "--workers must be a whole number >= 1, got 0"),
        (["--address", "127.0.0.1:1"], "no Ray cluster at --address 127.0.0.1:1"),
        (["--address", "head-node"], "--address head-node is not host:port"),
    ],
)
def test_bad_flags_are_one_line_errors_that_write_nothing(recipe, tmp_path, capsys, flags, message):
    assert main(["train-proposer", str(recipe), "--out", str(tmp_path / "out"), *flags]) == 2
    error = capsys.readouterr().err
    assert error.startswith("spotbench: error: ") and message in error and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_missing_recipe_is_a_one_line_error(tmp_path, capsys):
    assert main(["train-proposer", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("spotbench: error: cannot read recipe") and error.count("\n") == 1
    assert not (tmp_path / "out").exists()

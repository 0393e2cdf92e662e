"""Every malformed train-target and train-proposer recipe is one clear line (exit 2, nothing written),
and a setting given by a flag or by a file line gets the same message.

`CASES` maps a case id to (argv, a part of the one error line, files made in the empty folder first);
tests/spotbench/conftest.py checks each with the fixture `clear_error` and counts them in "malformed
inputs with clear errors X/X" after a run.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from spotbench.cli import main

RUN = shlex.split("run --models tiny-random:sdar --limit 1 --gen-length 16 --block-length 8 --output out")
NOT_UTF8 = b"models: [caf\xe9]\n"
TARGET_RECIPE = (
    "name: t\nfamily: sdar\ntasks: [arith]\noptimizer: {steps: 2}\n"
    "model: {hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2, num_kv_heads: 1, "
    "head_dim: 16}\n"
)
SPOT_RECIPE = (
    "name: t\ntarget: tiny-random:sdar\ntasks: {arith: 2}\noptimizer: {steps: 2}\n"
    "model: {width: 16, layers: 1, heads: 2, ffn: 32}\n"
)


def replaced(name: str, text: str) -> dict[str, str | bytes]:
    """A recipe with the line of one setting replaced (or added)."""
    base = TARGET_RECIPE if name == "target" else SPOT_RECIPE
    key = text.split(":", 1)[0]
    lines = [line for line in base.splitlines() if not line.startswith(key + ":")]
    return {"recipe.yaml": "\n".join(lines + [text]) + "\n"}


CASES = {
    # train-target recipes
    "target-recipe-not-utf8": (["train-target", "recipe.yaml", "--out", "out"], "not UTF-8", {"recipe.yaml": NOT_UTF8}),
    "target-recipe-missing": (["train-target", "nope.yaml", "--out", "out"], "cannot read recipe"),
    "target-steps-flag-negative": (
        ["train-target", "recipe.yaml", "--out", "out", "--steps", "-5"],
        "--steps must be a whole number >= 1, got -5",
        {"recipe.yaml": TARGET_RECIPE},
    ),
    "target-steps-flag-0": (
        ["train-target", "recipe.yaml", "--out", "out", "--steps", "0"],
        "--steps must be a whole number >= 1, got 0",
        {"recipe.yaml": TARGET_RECIPE},
    ),
    "target-steps-text": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "optimizer: steps must be a whole number >= 1",
        replaced("target", "optimizer: {steps: many}"),
    ),
    "target-learning-rate-text": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "optimizer: learning_rate must be a finite number > 0",
        replaced("target", "optimizer: {learning_rate: fast}"),
    ),
    "target-batch-size-0": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "optimizer: batch_size must be a whole number >= 1",
        replaced("target", "optimizer: {batch_size: 0}"),
    ),
    "target-tasks-not-list": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "tasks must be a list",
        replaced("target", "tasks: arith"),
    ),
    "target-model-value-type": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "hidden_size must be int, got big",
        replaced("target", "model: {hidden_size: big}"),
    ),
    "target-model-unknown-key": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "width is not a setting here",
        replaced("target", "model: {width: 16}"),
    ),
    "target-missing-key": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "family is missing",
        {"recipe.yaml": TARGET_RECIPE.replace("family: sdar\n", "")},
    ),
    "target-unknown-key": (
        ["train-target", "recipe.yaml", "--out", "out"],
        "stepz is an unknown setting",
        replaced("target", "stepz: 3"),
    ),
    # train-proposer recipes
    "spot-recipe-not-utf8": (["train-proposer", "recipe.yaml", "--out", "out"], "not UTF-8", {"recipe.yaml": NOT_UTF8}),
    "spot-steps-flag-negative": (
        ["train-proposer", "recipe.yaml", "--out", "out", "--steps", "-5"],
        "--steps must be a whole number >= 1",
        {"recipe.yaml": SPOT_RECIPE},
    ),
    "spot-temperatures-text": (
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "temperatures must be a finite number >= 0: 0 (greedy) or in [0.001, 1000], got abc",
        replaced("spot", "temperatures: abc"),
    ),
    "spot-tasks-count-text": (
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "must be a whole number >= 1, got many",
        replaced("spot", "tasks: {arith: many}"),
    ),
    "spot-model-value-type": (
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "width must be int, got wide",
        replaced("spot", "model: {width: wide}"),
    ),
    "spot-depth-decay-range": (
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "depth_decay must be in (0, 1]",
        replaced("spot", "depth_decay: 2"),
    ),
    "spot-workers-0": (
        ["train-proposer", "recipe.yaml", "--out", "out", "--workers", "0"],
        "--workers must be a whole number >= 1",
        {"recipe.yaml": SPOT_RECIPE},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_malformed_input_is_one_clear_line(case, clear_error) -> None:
    clear_error(*case)


@pytest.mark.parametrize(
    "name, flag, value, line",
    [
        ("budgets", "--budgets", "abc", "budgets: [abc]"),
        ("seeds", "--seeds", "-1", "seeds: [-1]"),
        ("seeds", "--seeds", str(2**64), f"seeds: [{2**64}]"),
        ("temperatures", "--temperatures", "nan", "temperatures: [.nan]"),
        ("rules", "--rules", "threshold:2.0", "rules: ['threshold:2.0']"),
        ("limit", "--limit", "0", "limit: 0"),
        ("batch_sizes", "--batch-size", "0", "batch_sizes: [0]"),
        ("replay_check", "--replay-check", "0", "replay_check: 0"),
        ("workers", "--workers", "0", "workers: 0"),
        ("steps", "--steps", "-5", "optimizer: {steps: -5}"),
    ],
)
def test_a_flag_and_a_file_line_give_the_same_message(name, flag, value, line, tmp_path, monkeypatch, capsys) -> None:
    """One validator per setting: only the named source differs (the flag, or the file and key)."""
    monkeypatch.chdir(tmp_path)
    if name == "steps":
        Path("recipe.yaml").write_text(TARGET_RECIPE.replace("optimizer: {steps: 2}", line))
        Path("good.yaml").write_text(TARGET_RECIPE)
        from_file, from_flag = (
            ["train-target", "recipe.yaml", "--out", "out"],
            ["train-target", "good.yaml", "--out", "out", flag, value],
        )
        where = "recipe recipe.yaml: optimizer"  # a setting of the recipe's optimizer block
    else:
        Path("suite.yaml").write_text(line + "\n")
        from_file, from_flag = ["run", "--suite", "suite.yaml"], [*RUN, flag, value]
        where = "suite suite.yaml"
    assert main(from_file) == 2 and main(from_flag) == 2
    file_error, flag_error = capsys.readouterr().err.splitlines()
    assert file_error.startswith(f"spotbench: error: {where}: {name}")
    assert flag_error.startswith(f"spotbench: error: {flag}")
    assert file_error.removeprefix(f"spotbench: error: {where}: {name}") == flag_error.removeprefix(
        f"spotbench: error: {flag}"
    )

"""The validation layer: what its types accept and how a failure reads."""

from __future__ import annotations

from typing import Any

import pytest

from harness.decoding import DecodeConfig, parse_rule
from harness.errors import UserError
from harness.targets.families import FAMILIES
from harness.targets.model import ModelConfig
from harness.validation import Count, NonNegative, Seed, check_value, listed, options_of


def test_numbers_from_text_and_yaml_alike_and_bools_are_not_numbers() -> None:
    assert check_value(Count, "3", "--n") == check_value(Count, 3, "n") == 3
    assert check_value(Seed, str(2**64 - 1), "--seed") == 2**64 - 1
    assert check_value(NonNegative, "0.5", "--t") == 0.5
    with pytest.raises(UserError, match=r"^--n must be a whole number >= 1, got True$"):
        check_value(Count, True, "--n")
    with pytest.raises(UserError, match=r"^--t must be a finite number >= 0, got inf$"):
        check_value(NonNegative, "inf", "--t")


def test_a_list_is_comma_separated_text_a_yaml_list_or_one_value() -> None:
    kind = listed(Count)
    assert check_value(kind, "2, 4,8", "--b") == check_value(kind, [2, 4, 8], "b") == (2, 4, 8)
    assert check_value(kind, 3, "b") == (3,)
    for bad, problem in (
        ([], "must list at least one value"),
        ("", "must list at least one value"),
        ("2,2", "must list each value once"),
        ("2,,4", "none empty"),
        ("2,4,", "none empty"),
    ):
        with pytest.raises(UserError, match=problem):
            check_value(kind, bad, "b")


def test_model_options_are_checked_by_the_config_fields_and_stay_a_dict() -> None:
    kind = options_of(ModelConfig, exclude=("vocab_size",))
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8}
    value: dict[str, Any] = {"hidden_size": "32", "moe": moe}
    checked = check_value(kind, value, "model")
    assert checked["hidden_size"] == 32 and checked["moe"]["num_experts"] == 4 and isinstance(checked["moe"], dict)
    with pytest.raises(UserError, match="vocab_size is not a setting here"):
        check_value(kind, {"vocab_size": 3}, "model")


def test_decode_config_checks_a_threshold_against_its_confidence_range() -> None:
    prob = FAMILIES["sdar"]
    for tau in ("2.0", "0", "-0.5"):
        with pytest.raises(UserError, match=r"tau outside \(0, 1\]"):
            DecodeConfig(parse_rule(f"threshold:{tau}", prob, 0))
    DecodeConfig(parse_rule("threshold:1", prob, 0))
    with pytest.raises(UserError, match=r"the seed must be a whole number in \[0, 2\*\*64\)"):
        DecodeConfig(parse_rule("top1", prob, 0), seed=2**64)

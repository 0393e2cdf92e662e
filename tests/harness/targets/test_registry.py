"""A target's trained block lengths, read without its weights: the default block length comes from
them, and another is refused unless a study asks for it."""

import json

import pytest

from harness.errors import UserError
from harness.targets.registry import (
    DEFAULT_BLOCK_LENGTH,
    block_length_trained,
    check_block_length_for,
    default_block_length,
    trained_block_lengths,
)


@pytest.mark.parametrize(
    "name, trained",
    [("sdar-smollm2", (4,)), ("sdar-a", (32,)), ("sdar-b", (32,)), ("llada-a", ()), ("dream-a", ())],
)
def test_zoo_targets_record_what_they_were_trained_at(name: str, trained: tuple[int, ...]) -> None:
    """Block-causal targets record their training block length; full-attention ones are trained on
    whole answers, so every block length is theirs."""
    assert trained_block_lengths(name) == trained
    assert default_block_length(name) == (trained[0] if trained else DEFAULT_BLOCK_LENGTH)


def test_a_converted_target_decodes_at_its_block_length_by_default() -> None:
    assert default_block_length("sdar-smollm2") == 4
    assert block_length_trained("sdar-smollm2", 4) is True
    assert block_length_trained("sdar-smollm2", 8) is False
    assert block_length_trained("tiny-random:sdar", 8) is None


def test_another_block_length_is_refused_unless_asked_for() -> None:
    with pytest.raises(UserError, match=r"trained at block length 4, not 8.*--untrained-block-length"):
        check_block_length_for("sdar-smollm2", 8, untrained=False)
    check_block_length_for("sdar-smollm2", 8, untrained=True)
    check_block_length_for("sdar-smollm2", 4, untrained=False)
    check_block_length_for("llada-a", 8, untrained=False)  # records none: any


@pytest.mark.parametrize("key", ["block_length", "block_size"])
def test_a_checkpoint_config_names_its_block_length(tmp_path, key: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "sdar", key: 4}))
    assert trained_block_lengths(str(tmp_path)) == (4,)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "sdar", key: "4"}))
    assert trained_block_lengths(str(tmp_path)) == ()  # not a block length: none recorded

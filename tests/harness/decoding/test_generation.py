"""The config types of a generation (`DecodeConfig`, `ARConfig`) check what library callers give them
as the command line checks flags, strictly: nothing is parsed from text or rounded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.decoding import DecodeConfig, parse_rule
from harness.decoding.autoregressive import ARConfig
from harness.errors import UserError
from harness.targets.families import FAMILIES

RULE = parse_rule("top1", FAMILIES["sdar"], 0)
BAD = [
    ({"seed": 1.5}, "the seed must be an int (not float), got 1.5"),
    ({"seed": 1.0}, "the seed must be an int (not float)"),
    ({"seed": True}, "the seed must be an int (not bool), got True"),
    ({"seed": "3"}, "the seed must be an int (not str), got 3"),
    ({"seed": -1}, "the seed must be a whole number in [0, 2**64), got -1"),
    ({"seed": 2**64}, "the seed must be a whole number in [0, 2**64)"),
    ({"gen_length": 0}, "the gen_length must be a whole number >= 1, got 0"),
    ({"gen_length": 8.0}, "the gen_length must be an int (not float)"),
    ({"temperature": "1"}, "the temperature must be a number (not str)"),
    ({"temperature": True}, "the temperature must be a number (not bool)"),
    ({"temperature": float("nan")}, "the temperature must be a finite number >= 0"),
    ({"temperature": 1e30}, "0 (greedy) or in [0.001, 1000], got 1e+30"),
    ({"temperature": 5e-324}, "0 (greedy) or in [0.001, 1000], got 5e-324"),
]


@pytest.mark.parametrize(
    "make", [lambda **kw: DecodeConfig(RULE, **kw), lambda **kw: ARConfig(**kw)], ids=["DecodeConfig", "ARConfig"]
)
@pytest.mark.parametrize("given, message", BAD, ids=[repr(kw) for kw, _ in BAD])
def test_a_config_refuses_what_the_command_line_would(make, given, message) -> None:
    with pytest.raises(UserError) as error:
        make(**given)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "make", [lambda **kw: DecodeConfig(RULE, **kw), lambda **kw: ARConfig(**kw)], ids=["DecodeConfig", "ARConfig"]
)
def test_integers_of_numpy_and_torch_are_taken_as_plain_ints(make) -> None:
    config = make(seed=np.uint64(2**64 - 1), gen_length=torch.tensor(8), temperature=np.float32(0.5))
    assert (config.seed, config.gen_length, config.temperature) == (2**64 - 1, 8, 0.5)
    assert type(config.seed) is int and type(config.gen_length) is int and type(config.temperature) is float
    assert make(temperature=0, seed=0).temperature == 0.0  # an int temperature is a number

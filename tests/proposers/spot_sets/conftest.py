"""The network the SPOT-Sets tests draft with and save as checkpoints, as a fixture (conftest modules
are not importable under --import-mode=importlib)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch

from proposers.spot.network import SpotConfig
from proposers.spot_sets.network import SpotSetsNet


@functools.cache
def _random_net(seed: int = 0) -> SpotSetsNet:
    torch.manual_seed(seed)
    net = SpotSetsNet(SpotConfig()).eval()
    for module in (net.commit_head, net.tau_project):  # random, not the zero start: any output is lossless
        torch.nn.init.normal_(module.weight, std=0.5)
    return net


@pytest.fixture
def random_net() -> Callable[..., SpotSetsNet]:
    """`random_net(seed=0)`: a network with random heads, one per seed for the whole session."""
    return _random_net

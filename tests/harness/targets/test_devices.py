"""Devices and dtypes as the flags spell them: resolved here or refused with one line, and every
target decodes on the device and in the dtype it was asked for (CPU here; a GPU in
benchmarks/device_check.py)."""

from __future__ import annotations

from typing import cast

import pytest
import torch

from harness.decoding import DecodeConfig, parse_rule, plain_decode, speculative_decode
from harness.decoding.tree import Proposer
from harness.errors import UserError
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.devices import resolve_device, resolve_dtype
from harness.targets.registry import load_dlm_target
from proposers import build_proposer

PROMPT = list(b"Q: 1+1=?\nA:")


def test_auto_is_the_cpu_in_float32_without_a_gpu_and_bf16_on_one() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert resolve_device("auto") == torch.device("cpu") and resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


@pytest.mark.parametrize(
    "device, message",
    [
        ("cuda", "no CUDA GPU is visible"),
        ("cuda:3", "no CUDA GPU is visible"),
        ("tpu", "unknown device"),
        ("mps", "unsupported device"),
    ],
)
def test_a_device_this_process_cannot_use_is_one_line(device: str, message: str) -> None:
    if torch.cuda.is_available() and device.startswith("cuda"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(UserError, match=message):
        resolve_device(device)


def test_an_unknown_dtype_names_the_choices() -> None:
    with pytest.raises(UserError, match="unknown dtype 'float8'; use auto, bfloat16"):
        resolve_dtype("float8", torch.device("cpu"))


@pytest.mark.parametrize("name", ["tiny-random:llada2", "sdar-a"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float64"])
def test_targets_load_in_the_requested_dtype_and_decode_losslessly(name: str, dtype: str) -> None:
    target = load_dlm_target(name, device="cpu", dtype=dtype)
    assert target.dtype == getattr(torch, dtype) and target.device == torch.device("cpu")
    assert all(p.dtype == target.dtype for p in target.model.parameters())
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 32, 16, 1.0, 3)
    plain = plain_decode(target, PROMPT, config)
    spec = speculative_decode(target, PROMPT, cast(Proposer, build_proposer("confidence", target, plain)), config, 4)
    # batched rows in bf16 may flip a near-tie; a flip at a real decision would be a logic error
    assert check_lossless(plain, spec, near_tie_tolerance(target.dtype)).verdict != "logic-error"
    if dtype == "float64":
        assert check_lossless(plain, spec, near_tie_tolerance(target.dtype)).exact


def test_exactness_mode_keeps_the_device_and_evaluates_rows_one_by_one() -> None:
    target = load_dlm_target("tiny-random:sdar", device="cpu", dtype="bfloat16").exact()
    assert target.dtype == torch.float64 and target.device == torch.device("cpu") and target.rowwise

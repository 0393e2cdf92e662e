"""Where a target runs and in which precision: `--device auto|cpu|cuda[:N]`, `--dtype auto|bfloat16|
float16|float32|float64`.

`auto` is a GPU when the process sees one (bf16 there, as the families' published code runs) and the
CPU otherwise (float32: CPU bf16 matmuls are slow and no more exact). Exactness mode overrides the
dtype with float64 and evaluates rows one by one (`DLMTarget.exact`). Noise is generated on the CPU in
float64 whatever the device, so it is bit-identical everywhere (`harness.decoding.noise`).
"""

from __future__ import annotations

import torch

from harness.errors import UserError

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def resolve_device(text: str = "auto") -> torch.device:
    """The device a name means here, refused (one line) when this process cannot use it."""
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise UserError(f"unknown device {text!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"unsupported device {text!r}; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {text}: no CUDA GPU is visible to this process; use --device cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"--device {text}: this process sees {torch.cuda.device_count()} GPU(s); "
                            f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return device


def resolve_dtype(text: str, device: torch.device) -> torch.dtype:
    if text == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if text not in DTYPES:
        raise UserError(f"unknown dtype {text!r}; use auto, {', '.join(DTYPES)}")
    return DTYPES[text]


def check_fits(parameters: int, dtype: torch.dtype, device: torch.device, what: str) -> None:
    """Refuse, before loading, a model whose weights alone exceed the GPU's free memory."""
    if device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    needed = parameters * torch.finfo(dtype).bits // 8
    if needed > free:
        raise UserError(f"{what} needs {needed / 2**30:.1f} GiB of weights in {str(dtype).removeprefix('torch.')} "
                        f"but {device} has {free / 2**30:.1f} GiB free; use a smaller --dtype, another GPU or "
                        "a GPU with more memory")

"""Where a target runs and in which precision: `--device auto|cpu|cuda[:N]`, `--dtype auto|bfloat16|
float16|float32|float64`.

`auto` is a GPU when the process sees one (bf16 there, as the families' published code runs) and the
CPU otherwise (float32: CPU bf16 matmuls are slow and no more exact). Exactness mode overrides the
dtype with float64 and evaluates rows one by one (`DLMTarget.exact`). Noise is generated on the CPU in
float64 whatever the device, so it is bit-identical everywhere (`harness.decoding.noise`).
"""

from __future__ import annotations

import os
from typing import Any

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
            raise UserError(
                f"--device {text}: this process sees {torch.cuda.device_count()} GPU(s); "
                f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
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
        raise UserError(
            f"{what} needs {needed / 2**30:.1f} GiB of weights in {str(dtype).removeprefix('torch.')} "
            f"but {device} has {free / 2**30:.1f} GiB free; use a smaller --dtype, another GPU or "
            "a GPU with more memory"
        )


def parameters(cfg: Any) -> int:
    """A `ModelConfig`'s parameter count (embeddings, attention, feed-forward or experts, output head)."""
    h, d = cfg.hidden_size, cfg.head_dim
    attention = h * d * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
    moe = cfg.moe
    dense = 3 * h * cfg.intermediate_size
    experts = 0 if moe is None else 3 * h * moe.moe_intermediate_size * (moe.num_experts + moe.num_shared_experts)
    dense_layers = cfg.num_layers if moe is None else moe.first_k_dense_replace
    feed_forward = dense_layers * dense + (cfg.num_layers - dense_layers) * experts
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * h
    return cfg.vocab_size * h + cfg.num_layers * attention + feed_forward + head


def batch_memory(
    cfg: Any,
    full_attention: bool,
    batch_size: int,
    rows_per_prompt: int,
    prompt_tokens: int,
    gen_length: int,
    block_length: int,
    dtype: torch.dtype,
) -> int:
    """Bytes a worker needs to decode `batch_size` prompts together (an estimate, from the config
    alone): the weights, every prompt's key/value store, and the largest pass: `rows_per_prompt` rows
    per prompt (1 + the largest budget), each over the whole sequence (full attention) or a block
    (block-causal, plus every prompt's prefill), with its logits, feed-forward and attention scores
    live, and a bound on the scratch positions of the store (`harness.targets.kv_store`) a tree pass writes."""
    size = torch.finfo(dtype).bits // 8
    keys = prompt_tokens + gen_length + block_length
    rows = batch_size * rows_per_prompt
    per_token = cfg.vocab_size + 2 * cfg.intermediate_size + 4 * cfg.hidden_size + cfg.num_heads * keys
    kv_per_token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim
    if full_attention:
        activations = rows * keys * per_token
        stores = 0
    else:
        activations = max(rows * block_length, batch_size * (prompt_tokens + block_length)) * per_token
        # the slots, and at most `keys` scratch columns per row of a pass (a tree writes rows x block)
        stores = batch_size * keys * kv_per_token + rows * keys * kv_per_token
    return (parameters(cfg) + activations + stores) * size


def check_batch_fits(needed: int, free: int, what: str) -> None:
    """Refuse a batch whose estimated memory exceeds what a worker has free, with the estimate."""
    if needed > free:
        raise UserError(
            f"{what} needs about {needed / 2**30:.1f} GiB per worker (estimated: weights, key/value "
            f"stores and the largest pass), but a worker has {free / 2**30:.1f} GiB; use a smaller "
            "--batch-size, fewer workers or a device with more memory"
        )


def available_memory() -> int:
    """Bytes of this machine's memory available to new processes (Linux `MemAvailable`, else free pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

"""Resolve a target name to a loaded `DLMTarget` or `ARTarget`.

Names: a zoo model (`spotbench zoo` lists them), `tiny-random:<family>[:seed]` (built in code), or a
path to a local Hugging Face checkpoint folder of a supported family; autoregressive targets
(`smollm2`, `tiny-random-ar[:seed]`, a causal-LM or GGUF folder: `harness.targets.ar`) are told apart
by name and config before anything loads (`target_kind`).
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import UserError
from harness.targets.ar import ARTarget, is_ar_name, load_ar_target
from harness.targets.checkpoint import CONFIG, check_token_id, load_checkpoint
from harness.targets.converted import is_converted, load_converted
from harness.targets.devices import resolve_device, resolve_dtype
from harness.targets.families import FamilySpec, family
from harness.targets.formats import detect_format
from harness.targets.target import DLMTarget, check_geometry
from harness.targets.tiny import parse_tiny_name, tiny_random_target
from harness.targets.zoo import model_dir, zoo_entry, zoo_names


def target_kind(name: str) -> str:
    """`ar` for an autoregressive target name, else `dlm` (the kind of proposers it takes)."""
    return "ar" if is_ar_name(name) else "dlm"


def family_of(name: str) -> FamilySpec:
    """A diffusion target's family from its name and config alone (no weights load): what checks of
    the decoding geometry need before any worker starts."""
    if name in zoo_names():
        return family(zoo_entry(name).family)
    if name.startswith("tiny-random"):
        return family(parse_tiny_name(name)[0])
    if is_converted(name):
        return family("converted")
    config = Path(name) / CONFIG
    try:
        return family(detect_format(json.loads(config.read_text(encoding="utf-8")), config).family)
    except (OSError, ValueError):
        raise UserError(
            f"unknown target {name!r}: no readable {config}; give a zoo model, "
            "tiny-random:<family>[:seed] or a checkpoint folder"
        ) from None


def check_lengths_for(name: str, gen_length: int, block_length: int) -> None:
    """UserError (one line) if `gen_length` is not one the target family's published `generate` takes."""
    check_geometry(family_of(name), gen_length, block_length)


def load_target(
    name: str, device: str = "cpu", dtype: str = "float32", mask_id: int | None = None, eos_id: int | None = None
) -> DLMTarget | ARTarget:
    """`device` and `dtype` as the flags spell them (`auto` allowed; `harness.targets.devices`).
    Checkpoint weights go straight to the device, tensor by tensor, without a full copy on the host.
    `mask_id` / `eos_id` override the target's own ids (`--mask-id` / `--eos-id`)."""
    where = resolve_device(device)
    precision = resolve_dtype(dtype, where)
    if is_ar_name(name):
        if mask_id is not None:
            raise UserError(f"--mask-id is for diffusion targets; {name} is autoregressive and has no mask token")
        ar = load_ar_target(name, where, precision)
        if eos_id is not None:
            ar.eos_id = check_token_id(eos_id, ar.vocab_size, "eos id", "--eos-id")
        return ar
    if name in zoo_names():
        load = load_converted if is_converted(model_dir(name)) else load_checkpoint
        target = load(model_dir(name), precision, where, mask_id, eos_id)
        target.name = name
        return target
    if name.startswith("tiny-random"):
        target = tiny_random_target(*parse_tiny_name(name)).to(where, precision)
        if mask_id is not None:
            target.mask_id = check_token_id(mask_id, target.vocab_size, "mask id", "--mask-id")
        if eos_id is not None:
            target.eos_id = check_token_id(eos_id, target.vocab_size, "eos id", "--eos-id")
        return target
    if is_converted(name):
        return load_converted(name, precision, where, mask_id, eos_id)
    if Path(name).exists():
        return load_checkpoint(name, precision, where, mask_id, eos_id)
    raise UserError(
        f"unknown target {name!r}; use a zoo model ({', '.join(zoo_names()) or 'none built'}), "
        "tiny-random:<family>[:seed], smollm2, tiny-random-ar[:seed] or an existing checkpoint folder"
    )


def load_dlm_target(name: str, device: str = "cpu", dtype: str = "float32", what: str = "this") -> DLMTarget:
    """`load_target` for a caller that needs a diffusion target (and has usually refused an
    autoregressive name already, with `target_kind`)."""
    target = load_target(name, device, dtype)
    if not isinstance(target, DLMTarget):
        raise UserError(f"{name} is an autoregressive target; {what} needs a diffusion target")
    return target


def load_ar_only(name: str, device: str = "cpu", dtype: str = "float32", what: str = "this") -> ARTarget:
    """`load_target` for a caller that needs an autoregressive target (checked, as `load_dlm_target`)."""
    target = load_target(name, device, dtype)
    if not isinstance(target, ARTarget):
        raise UserError(f"{name} is a diffusion target; {what} needs an autoregressive target")
    return target

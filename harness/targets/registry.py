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
from harness.targets.zoo import model_folder, zoo_entry, zoo_names


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
    if is_converted(model_folder(name)):
        return family("converted")
    config = model_folder(name) / CONFIG
    try:
        return family(detect_format(json.loads(config.read_text(encoding="utf-8")), config).family)
    except (OSError, ValueError):
        raise UserError(
            f"unknown target {name!r}: no readable {config}; give a zoo model, "
            "tiny-random:<family>[:seed] or a checkpoint folder"
        ) from None


DEFAULT_BLOCK_LENGTH = 32
"""The block length of a target that records none it was trained at (full-attention families are
trained on whole answers, so every block length is theirs; tiny random targets are not trained)."""
CONFIG_BLOCK_KEYS = ("block_length", "block_size")


def trained_block_lengths(name: str) -> tuple[int, ...]:
    """The block lengths a diffusion target was trained to decode, read without its weights: a
    converted folder's `converted.json`, a zoo model's `training.json`, a checkpoint config's
    `block_length` / `block_size`. Empty: it records none (any block length is its own)."""
    from harness.targets.converted import read_meta

    if is_ar_name(name) or name.startswith("tiny-random"):
        return ()
    folder = model_folder(name)
    if is_converted(folder):
        recorded = read_meta(folder).get("block_length")
    elif name in zoo_names():
        recorded = json.loads((folder / "training.json").read_text(encoding="utf-8")).get("block_length")
    else:
        try:
            config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ()
        recorded = next((config[k] for k in CONFIG_BLOCK_KEYS if isinstance(config, dict) and k in config), None)
    if isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 1:
        return ()
    return (recorded,)


def default_block_length(name: str) -> int:
    """The block length a target decodes at when none is asked for: the one it was trained at."""
    trained = trained_block_lengths(name)
    return trained[0] if trained else DEFAULT_BLOCK_LENGTH


def block_length_trained(name: str, block_length: int) -> bool | None:
    """Whether `name` was trained at `block_length`; None when it records no block length."""
    trained = trained_block_lengths(name)
    return (block_length in trained) if trained else None


def check_block_length_for(name: str, block_length: int, untrained: bool, flag: str = "--block-length") -> None:
    """UserError (one line) for a block length the target was not trained at, unless a study of
    untrained block lengths asks for it (`untrained`, recorded in every row)."""
    trained = trained_block_lengths(name)
    if trained and block_length not in trained and not untrained:
        lengths = ", ".join(map(str, trained))
        raise UserError(
            f"{name} was trained at block length {lengths}, not {block_length}: leave out {flag} to decode "
            f"at {trained[0]}, or add --untrained-block-length to study an untrained one (recorded in every row)"
        )


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
    if name.startswith("tiny-random"):
        target = tiny_random_target(*parse_tiny_name(name)).to(where, precision)
        if mask_id is not None:
            target.mask_id = check_token_id(mask_id, target.vocab_size, "mask id", "--mask-id")
        if eos_id is not None:
            target.eos_id = check_token_id(eos_id, target.vocab_size, "eos id", "--eos-id")
        return target
    folder = model_folder(name)
    if folder.exists():
        load = load_converted if is_converted(folder) else load_checkpoint
        target = load(folder, precision, where, mask_id, eos_id)
        if folder != Path(name):  # a zoo name or hub id keeps the name it was given
            target.name = name
        return target
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

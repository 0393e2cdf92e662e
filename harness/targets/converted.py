"""Autoregressive LMs converted to block diffusion, and the folder that ships one as a delta.

SDAR makes its block-diffusion models from trained AR checkpoints by a brief adaptation; spotbench
does the same for the causal LMs it can load (Llama, Qwen2, Qwen3 names: the `smollm2` GGUF, a local
causal-LM folder). The conversion keeps the base's weights and adds a gated LoRA adapter
(harness/targets/adapter.py) that is on only in the block being decoded:

- the prompt and the finished blocks are the base model's own causal computation (adapter off), so
  their keys/values are the AR model's and are cached once, as a block-causal target caches them;
- the active block attends to that context and bidirectionally to itself, adapter on;
- logits are shifted (position i-1 predicts token i), as Dream's: the row that predicts a block's
  first token is a clean row, so that prediction is the base's next-token distribution exactly,
  and the adapter only has to learn the positions after it;
- blocks lie on the absolute grid of the sdar family, and the mask token is an id the base's
  tokenizer holds but its chat never uses (recorded in the folder; `<empty_output>`, id 16, for
  SmolLM2), so no embedding row is added.

These are the `converted` family's conventions (harness/targets/families.py). Training:
harness/training/convert.py; measurements: docs/converted.md.

A converted folder holds `converted.json` (base name and weights hash, mask and eos ids, adapter rank)
and `adapter.safetensors` (the LoRA matrices by module name): a few MB over the base that the user
already has. Loading it over other base weights is a one-line UserError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.errors import UserError
from harness.targets import adapter
from harness.targets.families import family
from harness.targets.formats.qwen import tensor_map
from harness.targets.model import DLMTransformer, ModelConfig
from harness.targets.target import DLMTarget

CONVERTED_FILE = "converted.json"
ADAPTER_FILE = "adapter.safetensors"
FORMAT = "spotbench-converted"
CONVERTIBLE: dict[str, dict[str, Any]] = {"llama": {}, "qwen2": {"qkv_bias": True}, "qwen3": {"qk_norm": True}}
"""Causal-LM `model_type`s the converter maps onto `DLMTransformer`, with their switches."""


def is_converted(folder: str | Path) -> bool:
    return (Path(folder) / CONVERTED_FILE).is_file()


def model_config(config: Any, where: str) -> ModelConfig:
    """A transformers causal-LM config as a `ModelConfig`; UserError for what the forward pass does
    not implement (another architecture, scaled or windowed attention)."""
    model_type = getattr(config, "model_type", None)
    if model_type not in CONVERTIBLE:
        raise UserError(
            f"{where}: cannot convert model_type {model_type!r}; the converter knows "
            f"{', '.join(sorted(CONVERTIBLE))} causal LMs"
        )
    rope = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise UserError(f"{where}: scaled rotary embeddings ({rope}) are not supported")
    if any("sliding" in t for t in getattr(config, "layer_types", None) or ()):
        raise UserError(f"{where}: sliding-window attention layers are not supported")
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        raise UserError(f"{where}: only SwiGLU (silu, no bias) feed-forward layers are supported")
    heads = config.num_attention_heads
    return ModelConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        num_heads=heads,
        num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        rope_theta=float(theta),
        rms_norm_eps=float(config.rms_norm_eps),
        tie_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        **CONVERTIBLE[model_type],
    )


def from_causal_lm(causal_lm: nn.Module, where: str) -> DLMTransformer:
    """The causal LM's weights in a `DLMTransformer` (the tensors are shared, not copied)."""
    cfg = model_config(causal_lm.config, where)
    source = causal_lm.state_dict()
    state = {}
    for theirs, (ours,) in tensor_map(cfg).items():
        if theirs not in source:
            raise UserError(f"{where}: the causal LM has no weight {theirs}")
        state[ours] = source[theirs]
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    elif "lm_head.weight" not in state:
        state["lm_head.weight"] = source["lm_head.weight"]
    with torch.device("meta"):
        model = DLMTransformer(cfg)
    model.load_state_dict(state, strict=True, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    return model


def convert(base: Any, mask_id: int, rank: int, alpha: float, name: str = "") -> DLMTarget:
    """A fresh conversion of the AR target `base` (an `ARTarget`): the base's weights, frozen, with
    a zero-initialised adapter, so before training every clean row equals the base bitwise."""
    where = base.name or "the base model"
    model = from_causal_lm(base.model, where)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    if not 0 <= mask_id < model.cfg.vocab_size:
        raise UserError(f"mask id {mask_id} is not a token id of {where} (0..{model.cfg.vocab_size - 1})")
    model.adapter_gate = adapter.attach(model, rank, alpha)
    return DLMTarget(model, family("converted"), mask_id, base.eos_id, base.tokenizer, name=name)


def save_converted(target: DLMTarget, folder: Path, meta: dict, report: dict | None = None) -> None:
    """The adapter (float32), `converted.json` (meta plus mask/eos ids) and, for the zoo, the
    training report; the base is not written. Written to a staging folder that replaces `folder`
    whole, so a reader never sees half a checkpoint."""
    import shutil

    from safetensors.torch import save_file

    staging = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in adapter.lora_state(target.model).items()}
    save_file(tensors, str(staging / ADAPTER_FILE))
    record = {"format": FORMAT, "mask_id": target.mask_id, "eos_id": target.eos_id} | meta
    (staging / CONVERTED_FILE).write_text(json.dumps(record, indent=2) + "\n")
    if report is not None:
        (staging / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


def read_meta(folder: Path) -> dict:
    path = folder / CONVERTED_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable converted-target record ({error})") from None
    required = ("format", "base", "base_hash", "mask_id", "eos_id", "rank", "alpha")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or any(k not in meta for k in required):
        raise UserError(
            f"{path}: not a {FORMAT} record (needs {', '.join(required)}); write one with spotbench convert"
        )
    if not (folder / ADAPTER_FILE).is_file():
        raise UserError(f"{folder}: {ADAPTER_FILE} is missing; the folder is not a complete converted target")
    kinds: dict[str, type | tuple[type, ...]] = {
        "base": str,
        "base_hash": str,
        "mask_id": int,
        "eos_id": int,
        "rank": int,
        "alpha": (int, float),
    }
    for key, kind in kinds.items():
        value = meta[key]
        nonpositive = key in ("rank", "alpha") and isinstance(value, (int, float)) and value <= 0
        if isinstance(value, bool) or not isinstance(value, kind) or nonpositive:
            raise UserError(
                f"{path}: {key} is {value!r}, not a valid {key.replace('_', ' ')}; write the record "
                "with spotbench convert"
            )
    return meta


def check_converted(folder: Path) -> None:
    """What can be checked before any weight loads: the record, the adapter file, and that its base
    names a loadable AR target (`smollm2` installed, a causal-LM folder present)."""
    from harness.targets.ar import check_ar_name, is_ar_name

    meta = read_meta(folder)
    if not is_ar_name(meta["base"]):
        raise UserError(
            f"{folder / CONVERTED_FILE}: base {meta['base']!r} is not an autoregressive target this "
            "machine can load; install it or fix the record's base"
        )
    check_ar_name(meta["base"])


def load_converted(
    folder: str | Path, dtype: torch.dtype, device: torch.device, mask_id: int | None = None, eos_id: int | None = None
) -> DLMTarget:
    """The converted target in `folder`: its base loaded by name (`smollm2`, a causal-LM folder),
    checked against the recorded weights hash, with the adapter applied."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from harness.targets.ar import load_ar_target
    from harness.targets.checkpoint import check_token_id

    folder = Path(folder)
    meta = read_meta(folder)
    base = load_ar_target(meta["base"], device, torch.float32)
    found = adapter.weights_hash(base.model)
    if found != meta["base_hash"]:
        raise UserError(
            f"{folder} is a delta over base {meta['base']!r} with weights hash {meta['base_hash']}, "
            f"but those weights hash {found}; install the base it was converted from "
            "(docs/converted.md) or convert this base with spotbench convert"
        )
    try:
        weights = load_file(str(folder / ADAPTER_FILE))
    except (SafetensorError, OSError) as error:
        raise UserError(f"{folder / ADAPTER_FILE}: unreadable ({error})") from None
    target = convert(base, meta["mask_id"], meta["rank"], meta["alpha"], name=str(folder))
    if not adapter.load_lora(target.model, weights):
        raise UserError(f"{folder / ADAPTER_FILE}: its matrices do not fit {meta['base']} at rank {meta['rank']}")
    vocab = target.vocab_size
    target.eos_id = check_token_id(meta["eos_id"], vocab, "eos id", f"a correct eos_id in {CONVERTED_FILE}")
    if mask_id is not None:
        target.mask_id = check_token_id(mask_id, vocab, "mask id", "--mask-id")
    if eos_id is not None:
        target.eos_id = check_token_id(eos_id, vocab, "eos id", "--eos-id")
    return target.to(device, dtype)

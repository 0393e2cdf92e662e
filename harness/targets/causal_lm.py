"""A pretrained causal LM read from a local folder or GGUF file with `transformers`, offline and with no
remote code, refused in one line when it would load partly (weights initialized at random), has
sliding-window layers the tree verifier cannot mask, or names no end-of-sequence token."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.errors import UserError
from harness.targets.devices import check_fits


@dataclass
class CausalLM:
    model: Any
    tokenizer: Any
    eos_id: int


def load_causal_lm(folder: Path, gguf_file: str | None, dtype: torch.dtype, device: torch.device) -> CausalLM:
    """`AutoModelForCausalLM` and `AutoTokenizer` from a local folder, offline, no remote code. A
    checkpoint's size is checked against the device from its config before any weight is read and
    its weights go straight to the device; a GGUF file is dequantized on the host by transformers
    anyway (and parsing it only for its config costs seconds), so it is checked once loaded there."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    options: dict[str, Any] = {"local_files_only": True, "trust_remote_code": False}
    loaded: Any  # (model, loading info): from_pretrained's annotation leaves out output_loading_info=True
    try:
        if gguf_file:
            options["gguf_file"] = gguf_file
            loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, output_loading_info=True, **options)
            model, info = loaded
            check_fits(model.num_parameters(), dtype, device, str(folder / gguf_file))
            model.to(device)
        else:
            config = AutoConfig.from_pretrained(str(folder), **options)
            with torch.device("meta"):
                check_fits(AutoModelForCausalLM.from_config(config).num_parameters(), dtype, device, str(folder))
            loaded = AutoModelForCausalLM.from_pretrained(
                str(folder), dtype=dtype, device_map=str(device), output_loading_info=True, **options
            )
            model, info = loaded
        tokenizer = AutoTokenizer.from_pretrained(str(folder), **options)
    except (OSError, ValueError, KeyError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UserError(f"{folder}: cannot load a causal LM ({first})") from None
    partial = sorted(info["missing_keys"]) + sorted(str(k) for k in info["mismatched_keys"])
    if partial:  # transformers would initialize these at random: never a silent partial load
        raise UserError(
            f"{folder}: the checkpoint lacks or mis-shapes {len(partial)} weights of its "
            f"{type(model).__name__}, e.g. {partial[0]}"
        )
    layer_types = getattr(model.config, "layer_types", None) or ()
    if any("sliding" in t for t in layer_types):
        raise UserError(f"{folder}: sliding-window attention layers are not supported by the tree verifier")
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else model.generation_config.eos_token_id
    if isinstance(eos, list):
        eos = eos[0]
    if eos is None:
        raise UserError(f"{folder}: neither the tokenizer nor the generation config names an end-of-sequence token")
    return CausalLM(model, tokenizer, int(eos))

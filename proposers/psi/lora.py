"""Uno's diffusion weights: a gated LoRA on q, k, v, o, gate, up and down of every layer of a causal
LM, and the drafter folder that holds only those weights.

The adapter is harness/targets/adapter.py's (shared with converted diffusion targets): the LoRA branch
is multiplied per token by a 0/1 gate: on at noisy (draft) rows, off at clean rows.
A gated-off row takes `torch.where`'s base branch, the base linear's own output, so clean rows
compute the base model bitwise and their keys/values are the target's: the drafter reads the
target's KV cache instead of keeping its own. The adapted model is a copy of the base module tree
that shares the base's parameter tensors (no second copy of the weights); the base model is never
modified, so a target can serve other arms (and several drafters) at once.

A drafter folder: `drafter.safetensors` (the LoRA A/B matrices by module name) and `drafter.json`
(recipe, rank, base model name and a hash of its weights, learning curve). A drafter only drafts for
the weights it was distilled from: loading it on another base is a one-line UserError.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from harness.errors import UserError
from harness.targets.adapter import attach, load_lora, lora_state, weights_hash

WEIGHTS_FILE = "drafter.safetensors"
META_FILE = "drafter.json"


class GatedLoRAModel(nn.Module):
    """A causal LM with gated LoRA on every `LORA_TARGETS` linear; `forward(gate=...)` sets the gate
    for one call."""

    def __init__(self, base: nn.Module, rank: int, alpha: float):
        super().__init__()
        memo = {id(p): p for p in base.parameters()}  # share the base's weights, copy only the module tree
        self.model: Any = copy.deepcopy(base, memo)  # a transformers causal LM, read through its own API
        self.gate = attach(self.model, rank, alpha)
        self.rank, self.alpha = rank, alpha
        for parameter in base.parameters():
            parameter.requires_grad_(False)

    def forward(self, gate: Tensor | None = None, **inputs: Any) -> Any:
        self.gate.mask = gate
        try:
            return self.model(**inputs)
        finally:
            self.gate.mask = None

    def hidden(self, gate: Tensor | None, **inputs: Any) -> Tensor:
        """The last hidden states [batch, rows, hidden] (training picks the rows it needs logits of)."""
        self.gate.mask = gate
        try:
            return self.model.base_model(**inputs).last_hidden_state
        finally:
            self.gate.mask = None

    def lora_state(self) -> dict[str, Tensor]:
        return lora_state(self)

    def load_lora(self, state: dict[str, Tensor]) -> None:
        if not load_lora(self, state):
            raise UserError(
                f"the drafter's LoRA weights do not fit this model ({len(state)} tensors for "
                f"{len(lora_state(self))} adapted projections)"
            )


def save_drafter(drafter: GatedLoRAModel, folder: Path, meta: dict) -> None:
    """The LoRA weights (float32) and the provenance; the base weights are not written."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in drafter.lora_state().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def read_meta(folder: Path) -> dict:
    if not (folder / META_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        raise UserError(
            f"no Psi-Spec drafter in {folder} (expected {META_FILE} and {WEIGHTS_FILE}); give the "
            "folder written by spotbench train-drafter"
        )
    return json.loads((folder / META_FILE).read_text())


def load_drafter(folder: Path, base: nn.Module) -> GatedLoRAModel:
    """The drafter in `folder` on `base` (sharing its weights); UserError if it was distilled from
    other weights."""
    from safetensors.torch import load_file

    meta = read_meta(folder)
    found = weights_hash(base)
    if meta["base_hash"] != found:
        raise UserError(
            f"drafter {folder} was trained for base model {meta['base']!r} (weights hash "
            f"{meta['base_hash']}), not these weights (hash {found}); train one for this model with "
            "spotbench train-drafter"
        )
    drafter = GatedLoRAModel(base, meta["rank"], meta["alpha"])
    drafter.load_lora(load_file(str(folder / WEIGHTS_FILE)))
    return drafter.eval()

"""Uno's diffusion weights: a gated LoRA on q, k, v, o, gate, up and down of every layer of a causal
LM, and the drafter folder that holds only those weights.

The LoRA branch is multiplied per token by a 0/1 gate: on at noisy (draft) rows, off at clean rows.
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
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from harness.errors import UserError

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
WEIGHTS_FILE = "drafter.safetensors"
META_FILE = "drafter.json"


class Gate:
    """The per-token gate all adapted linears of one model read: None (every row clean) or a bool
    tensor [batch, rows], True at noisy rows."""

    def __init__(self) -> None:
        self.mask: Tensor | None = None


class GatedLoRALinear(nn.Module):
    """`base(x)` at gated-off rows, `base(x) + scale * B(A(x))` at gated-on rows."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, gate: Gate):
        super().__init__()
        self.base = base
        self.gate = gate
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, dtype=base.weight.dtype,
                                               device=base.weight.device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype,
                                               device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: Tensor) -> Tensor:
        out = self.base(x)
        mask = self.gate.mask
        if mask is None:
            return out
        lora = (x @ self.lora_a.T) @ self.lora_b.T * self.scale
        return torch.where(mask[..., None].to(out.device), out + lora, out)


class GatedLoRAModel(nn.Module):
    """A causal LM with gated LoRA on every `LORA_TARGETS` linear; `forward(gate=...)` sets the gate
    for one call."""

    def __init__(self, base: nn.Module, rank: int, alpha: float):
        super().__init__()
        memo = {id(p): p for p in base.parameters()}  # share the base's weights, copy only the module tree
        self.model = copy.deepcopy(base, memo)
        self.gate = Gate()
        self.rank, self.alpha = rank, alpha
        for name, module in list(self.model.named_modules()):
            for child_name, child in list(module.named_children()):
                if child_name in LORA_TARGETS and isinstance(child, nn.Linear):
                    setattr(module, child_name, GatedLoRALinear(child, rank, alpha, self.gate))
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
        return {name: p for name, p in self.named_parameters() if "lora_" in name}

    def load_lora(self, state: dict[str, Tensor]) -> None:
        own = self.lora_state()
        if set(state) != set(own) or any(state[k].shape != own[k].shape for k in own):
            raise UserError(f"the drafter's LoRA weights do not fit this model ({len(state)} tensors for "
                            f"{len(own)} adapted projections)")
        with torch.no_grad():
            for name, value in state.items():
                own[name].copy_(value.to(own[name].dtype))


_HASHES: dict[int, tuple[nn.Module, str]] = {}


def weights_hash(model: nn.Module) -> str:
    """sha256 of the base model's weights (names, shapes, values rounded to bfloat16, so the same
    weights hash alike whether loaded in float32, float64 or bfloat16); cached per model object."""
    cached = _HASHES.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().to("cpu", torch.bfloat16).view(torch.int16).numpy().tobytes())
    _HASHES[id(model)] = (model, digest.hexdigest()[:16])
    return _HASHES[id(model)][1]


def save_drafter(drafter: GatedLoRAModel, folder: Path, meta: dict) -> None:
    """The LoRA weights (float32) and the provenance; the base weights are not written."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in drafter.lora_state().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def read_meta(folder: Path) -> dict:
    if not (folder / META_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        raise UserError(f"no Psi-Spec drafter in {folder} (expected {META_FILE} and {WEIGHTS_FILE}); give the "
                        "folder written by spotbench train-drafter")
    return json.loads((folder / META_FILE).read_text())


def load_drafter(folder: Path, base: nn.Module) -> GatedLoRAModel:
    """The drafter in `folder` on `base` (sharing its weights); UserError if it was distilled from
    other weights."""
    from safetensors.torch import load_file

    meta = read_meta(folder)
    found = weights_hash(base)
    if meta["base_hash"] != found:
        raise UserError(f"drafter {folder} was trained for base model {meta['base']!r} (weights hash "
                        f"{meta['base_hash']}), not these weights (hash {found}); train one for this model with "
                        "spotbench train-drafter")
    drafter = GatedLoRAModel(base, meta["rank"], meta["alpha"])
    drafter.load_lora(load_file(str(folder / WEIGHTS_FILE)))
    return drafter.eval()

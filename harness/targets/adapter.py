"""A gated LoRA adapter: low-rank weights that act on some rows of a forward pass and not on others.

Both ways spotbench turns an autoregressive LM into something that writes several tokens at once use
it: a converted diffusion target (harness/targets/converted.py) and a Psi-Spec drafter
(proposers/psi). The branch is multiplied per token by a 0/1 gate: on at the rows being denoised,
off at clean rows. A gated-off row takes `torch.where`'s base branch, the base linear's own output,
so clean rows compute the base model bitwise and their keys/values are the base's.

`weights_hash` pins the base an adapter was trained on: an adapter loaded over other weights is
refused, never silently applied.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import Tensor, nn

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class Gate:
    """The per-token gate all adapted linears of one model read: None (every row clean) or a bool
    tensor [batch, rows], True at adapted rows."""

    def __init__(self) -> None:
        self.mask: Tensor | None = None


class GatedLoRALinear(nn.Module):
    """`base(x)` at gated-off rows, `base(x) + scale * B(A(x))` at gated-on rows."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, gate: Gate):
        super().__init__()
        self.base = base
        self.gate = gate
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(
            torch.empty(rank, base.in_features, dtype=base.weight.dtype, device=base.weight.device)
        )
        self.lora_b = nn.Parameter(
            torch.zeros(base.out_features, rank, dtype=base.weight.dtype, device=base.weight.device)
        )
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: Tensor) -> Tensor:
        out = self.base(x)
        mask = self.gate.mask
        if mask is None:
            return out
        lora = (x @ self.lora_a.T) @ self.lora_b.T * self.scale
        return torch.where(mask[..., None].to(out.device), out + lora, out)


def attach(model: nn.Module, rank: int, alpha: float) -> Gate:
    """Wrap every `LORA_TARGETS` linear of `model` in place; returns the gate they all read. The
    wrapped linears keep their weight tensors (nothing is copied)."""
    gate = Gate()
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if child_name in LORA_TARGETS and isinstance(child, nn.Linear):
                setattr(module, child_name, GatedLoRALinear(child, rank, alpha, gate))
    return gate


def lora_state(model: nn.Module) -> dict[str, Tensor]:
    """The adapter's parameters by name (`...q_proj.lora_a`, ...)."""
    return {name: p for name, p in model.named_parameters() if "lora_" in name}


def load_lora(model: nn.Module, state: dict[str, Tensor]) -> bool:
    """Copy `state` into the adapter; False (nothing copied) if names or shapes do not fit."""
    own = lora_state(model)
    if set(state) != set(own) or any(state[k].shape != own[k].shape for k in own):
        return False
    with torch.no_grad():
        for name, value in state.items():
            own[name].copy_(value.to(own[name].dtype))
    return True


_HASHES: dict[int, tuple[nn.Module, str]] = {}


def weights_hash(model: nn.Module) -> str:
    """sha256 of a model's base weights (names, shapes, values rounded to bfloat16, so the same
    weights hash alike whether loaded in float32, float64 or bfloat16; adapter weights excluded);
    cached per model object."""
    cached = _HASHES.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if "lora_" in name:
            continue
        digest.update(f"{name.replace('.base.', '.')}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().to("cpu", torch.bfloat16).view(torch.int16).numpy().tobytes())
    _HASHES[id(model)] = (model, digest.hexdigest()[:16])
    return _HASHES[id(model)][1]

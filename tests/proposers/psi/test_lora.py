"""The gated LoRA: gated-off rows compute the base model bitwise (and gated-on rows do too while B is
zero); the drafter folder refuses a base with other weights."""

from __future__ import annotations

import functools

import pytest
import torch

from harness.errors import UserError
from harness.targets.adapter import LORA_TARGETS, GatedLoRALinear
from harness.targets.ar import ARTarget, tiny_random_ar
from proposers.psi.lora import GatedLoRAModel, load_drafter, save_drafter, weights_hash


@functools.cache
def tiny(seed: int = 0) -> ARTarget:
    return tiny_random_ar(seed)


def logits(model, ids: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
    with torch.inference_mode():
        if isinstance(model, GatedLoRAModel):
            return model(gate=gate, input_ids=ids).logits
        return model(input_ids=ids).logits


def test_every_projection_of_every_layer_is_adapted_and_the_base_is_shared():
    base = tiny().model
    drafter = GatedLoRAModel(base, rank=4, alpha=8.0)
    adapted = [name for name, m in drafter.model.named_modules() if isinstance(m, GatedLoRALinear)]
    assert len(adapted) == len(LORA_TARGETS) * base.config.num_hidden_layers
    assert drafter.model.model.layers[1].mlp.down_proj.base.weight is base.model.layers[1].mlp.down_proj.weight
    assert not any(isinstance(m, GatedLoRALinear) for m in base.modules())  # the target is left as it was


def test_gate_off_is_the_base_model_bitwise():
    base = tiny().model
    drafter = GatedLoRAModel(base, rank=4, alpha=8.0)
    ids = torch.randint(0, 200, (2, 14), generator=torch.Generator().manual_seed(0))
    reference = logits(base, ids)
    gate = torch.zeros(2, 14, dtype=torch.bool)
    gate[:, 9:] = True
    assert torch.equal(logits(drafter, ids), reference)  # no gate at all
    assert torch.equal(logits(drafter, ids, gate), reference)  # gate on, B still zero: the branch adds 0
    with torch.no_grad():
        for name, parameter in drafter.lora_state().items():
            if name.endswith("lora_b"):
                parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    trained = logits(drafter, ids, gate)
    assert torch.equal(trained[:, :9], reference[:, :9])  # clean rows precede the gated ones: bitwise
    assert not torch.allclose(trained[:, 9:], reference[:, 9:])  # negative control: the gate is really on there
    assert torch.equal(logits(drafter, ids), reference)


def test_a_drafter_for_other_weights_is_refused(tmp_path):
    drafter = GatedLoRAModel(tiny(0).model, rank=4, alpha=8.0)
    meta = {
        "base": "tiny-random-ar:0",
        "base_hash": weights_hash(tiny(0).model),
        "rank": 4,
        "alpha": 8.0,
        "max_block": 4,
    }
    save_drafter(drafter, tmp_path, meta)
    assert load_drafter(tmp_path, tiny(0).model).rank == 4
    assert weights_hash(tiny(0).exact().model) == weights_hash(tiny(0).model)  # float64 copy: same weights
    with pytest.raises(UserError, match="was trained for base model 'tiny-random-ar:0'") as error:
        load_drafter(tmp_path, tiny(1).model)
    assert "\n" not in str(error.value)
    with pytest.raises(UserError, match="no Psi-Spec drafter"):
        load_drafter(tmp_path / "missing", tiny(0).model)

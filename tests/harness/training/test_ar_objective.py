"""train-target family ar: next-token targets on the answer only (through its first EOS), and the
trained folder is an AR target that `load_target` reads and decodes."""

import dataclasses

import pytest

from harness.errors import UserError
from harness.recipes import Optimizer
from harness.targets.ar import ARTarget
from harness.targets.registry import load_target, target_kind
from harness.targets.tiny import byte_tokenizer
from harness.training.ar_objective import ar_batch
from harness.training.objective import Example
from harness.training.train_target import Recipe, train

RECIPE = Recipe(
    name="micro-ar",
    family="ar",
    tasks=[],
    seed=3,
    answer_length=16,
    optimizer=Optimizer(
        steps=4, batch_size=4, learning_rate=3e-3, warmup_steps=1, weight_decay=0.01, checkpoint_every=2
    ),
    validation_examples=4,
    model=dict(
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        head_dim=16,
        tie_embeddings=True,
    ),
)


def test_targets_are_the_answer_through_its_first_eos():
    eos, pad = 2, 0
    ids, targets = ar_batch([Example([10, 11, 12], [20, 21, eos, eos, eos]), Example([13], [22, eos, eos])], eos, pad)
    assert ids.tolist() == [[10, 11, 12, 20, 21, 2], [13, 22, 2, 0, 0, 0]]
    assert targets.tolist() == [[-100, -100, 20, 21, 2, -100], [22, 2, -100, -100, -100, -100]]


@pytest.mark.slow
def test_an_ar_recipe_trains_a_loadable_causal_lm(tmp_path):
    tokenizer = byte_tokenizer()
    eos = tokenizer.eos_token_id
    examples = [Example([65 + i % 7, 66, 67], [70 + i % 5, 71] + [eos] * 14) for i in range(40)]
    report = train(RECIPE, examples, tokenizer, tmp_path / "run")
    assert report["family"] == "ar" and report["steps"] == 4 and report["heldout_loss"] > 0
    folder = str(tmp_path / "run" / "model")
    assert target_kind(folder) == "ar"
    target = load_target(folder)
    assert isinstance(target, ARTarget) and target.eos_id == eos and target.vocab_size == len(tokenizer)
    with pytest.raises(UserError, match="family ar is a Llama causal LM; drop qk_norm"):
        train(
            dataclasses.replace(RECIPE, model=RECIPE.model | {"qk_norm": True}), examples, tokenizer, tmp_path / "bad"
        )

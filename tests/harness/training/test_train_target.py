"""train-target: deterministic by seed, and an interrupted run resumes to the same weights."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from harness.errors import UserError
from harness.recipes import Optimizer
from harness.targets.registry import load_dlm_target
from harness.targets.tiny import byte_tokenizer
from harness.training.objective import Example
from harness.training.train_target import Recipe, train

RECIPE = Recipe(
    name="micro",
    family="sdar",
    tasks=[],
    seed=3,
    block_length=8,
    answer_length=16,
    optimizer=Optimizer(
        steps=6, batch_size=4, learning_rate=3e-3, warmup_steps=2, weight_decay=0.01, checkpoint_every=3
    ),
    validation_examples=4,
    model=dict(
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        head_dim=16,
        qk_norm=True,
        tie_embeddings=True,
    ),
)


def _examples(tokenizer) -> list[Example]:
    eos = tokenizer.eos_token_id
    return [Example([65 + i % 7, 66, 67], [70 + i % 5, 71] + [eos] * 14) for i in range(40)]


def _weights(folder) -> dict[str, torch.Tensor]:
    return load_file(folder / "model" / "model.safetensors")


def test_resume_after_interruption_gives_the_same_model(tmp_path, monkeypatch) -> None:
    tokenizer = byte_tokenizer()
    straight = train(RECIPE, _examples(tokenizer), tokenizer, tmp_path / "straight")

    calls = {"n": 0}
    original = torch.optim.AdamW.step

    def crash_on_fifth_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", crash_on_fifth_step)
    with pytest.raises(KeyboardInterrupt):
        train(RECIPE, _examples(tokenizer), tokenizer, tmp_path / "resumed")
    monkeypatch.setattr(torch.optim.AdamW, "step", original)
    resumed = train(RECIPE, _examples(tokenizer), tokenizer, tmp_path / "resumed")

    assert resumed == straight
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "resumed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    report = json.loads((tmp_path / "straight" / "model" / "training.json").read_text())
    assert report["steps"] == 6 and report["training_tokens"] > 0
    target = load_dlm_target(str(tmp_path / "straight" / "model"))
    assert target.family.name == "sdar" and target.mask_id == tokenizer.mask_token_id


def test_another_seed_gives_another_model(tmp_path) -> None:
    tokenizer = byte_tokenizer()
    train(RECIPE, _examples(tokenizer), tokenizer, tmp_path / "a")
    train(dataclasses.replace(RECIPE, seed=4), _examples(tokenizer), tokenizer, tmp_path / "b")
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert not torch.equal(a["model.embed_tokens.weight"], b["model.embed_tokens.weight"])


def test_a_run_folder_of_another_recipe_is_refused(tmp_path) -> None:
    tokenizer = byte_tokenizer()
    train(RECIPE, _examples(tokenizer), tokenizer, tmp_path / "run")
    with pytest.raises(UserError, match="different recipe"):
        train(
            dataclasses.replace(RECIPE, optimizer=dataclasses.replace(RECIPE.optimizer, steps=7)),
            _examples(tokenizer),
            tokenizer,
            tmp_path / "run",
        )


def test_bad_recipe_files_are_one_line_errors(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfamily: sdar\nmodel: {}\ntasks: []\nsteps_typo: 3\n")
    with pytest.raises(UserError, match="steps_typo is an unknown setting"):
        Recipe.load(bad)
    bad.write_text("[1, 2")
    with pytest.raises(UserError, match="cannot read recipe"):
        Recipe.load(bad)

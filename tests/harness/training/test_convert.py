"""Converting an AR LM to block diffusion: the converted model is its base outside the active block,
the training layout is the decoder's pass, training resumes bit-identically, and a delta refuses
other base weights."""

import dataclasses
import json
from typing import Any

import pytest
import torch
import yaml

from harness.errors import UserError
from harness.targets import adapter
from harness.targets.ar import tiny_random_ar
from harness.targets.converted import (
    CONVERTED_FILE,
    convert,
    from_causal_lm,
    load_converted,
    model_config,
    save_converted,
)
from harness.training import convert as convert_module
from harness.training import loop
from harness.training.convert import ConvertRecipe, start_from_adapter, train_conversion
from harness.training.loop import state_files
from harness.training.masked_blocks import Sequence, layout

PROMPT = [(37 * i + 11) % 200 + 30 for i in range(11)]
ANSWER = [(53 * i + 7) % 200 + 30 for i in range(13)]


def _randomise(target, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    for parameter in adapter.lora_state(target.model).values():
        parameter.data = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * 0.2


def test_without_its_adapter_the_converted_model_is_the_causal_lm() -> None:
    base = tiny_random_ar(1)
    ids = torch.tensor([PROMPT + ANSWER])
    with torch.no_grad():
        expected = base.model(ids).logits
        model = from_causal_lm(base.model, "tiny")
        positions = torch.arange(ids.shape[1])
        causal = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()
        ours, _ = model(ids, positions, causal)
    assert float((ours - expected).abs().max()) < 1e-5


def test_the_adapter_acts_at_adapted_rows_only() -> None:
    target = convert(tiny_random_ar(1), mask_id=5, rank=4, alpha=8.0)
    _randomise(target)
    ids = torch.tensor([PROMPT])
    positions = torch.arange(ids.shape[1])
    causal = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()
    adapted = positions[None] >= 8
    with torch.no_grad():
        off, _ = target.model(ids, positions, causal)
        on, _ = target.model(ids, positions, causal, adapted=adapted)
    assert torch.equal(on[:, :8], off[:, :8])  # clean rows: the base, bitwise
    assert float((on[:, 8:] - off[:, 8:]).abs().max()) > 1e-3  # negative control: the adapter acts


def test_the_training_layout_is_the_decoders_pass() -> None:
    """Every noisy block's logits in training equal the session's pass over that block state with
    the blocks before it committed (float64), including the shifted first row and the prompt's tail."""
    target = convert(tiny_random_ar(2), mask_id=5, rank=4, alpha=8.0)
    _randomise(target)
    target = target.exact()
    size = 4
    seq = Sequence(PROMPT + ANSWER + [target.eos_id] * 0, len(PROMPT))
    seq.tokens += [target.eos_id] * (-len(seq.tokens) % size)
    batch = layout([seq], size, target.mask_id, torch.Generator().manual_seed(3))
    assert (batch.noisy_ids == target.mask_id).any()
    clean_positions = torch.arange(batch.clean_ids.shape[1])
    with torch.no_grad():
        _, kv = target.model.hidden(batch.clean_ids, clean_positions, batch.clean_attend)
        hidden, _ = target.model.hidden(
            batch.noisy_ids,
            batch.noisy_positions,
            batch.noisy_attend,
            kv,
            torch.ones_like(batch.noisy_ids, dtype=torch.bool),
        )
        trained_logits = target.model.lm_head(hidden)[0]
    origin = len(PROMPT) - len(PROMPT) % size
    tokens = torch.tensor(seq.tokens)
    for start in range(origin, len(seq.tokens), size):
        session = target.start(PROMPT, len(seq.tokens) - len(PROMPT), size)
        for earlier in range(origin, start, size):
            session.finish_block(tokens[earlier : earlier + size])
        state = batch.noisy_ids[0, start - origin : start - origin + size]
        current = session.forward(state[None]).current[0]
        rows = trained_logits[start - origin : start - origin + size - 1]
        assert float((current[1:] - rows).abs().max()) < 1e-10, start
        if start > 0:  # the first token's row is the base's clean row before the block
            with torch.no_grad():
                full = target.model(
                    tokens[None, :start], torch.arange(start), torch.ones(start, start, dtype=torch.bool).tril()
                )[0][0, -1]
            assert float((current[0] - full).abs().max()) < 1e-10


def test_every_trained_row_predicts_a_masked_answer_token_of_its_block() -> None:
    size = 4
    seq = Sequence(PROMPT + ANSWER + [2, 2, 2, 2][: -(len(PROMPT + ANSWER)) % size], len(PROMPT))
    batch = layout([seq, seq], size, mask_id=5, generator=torch.Generator().manual_seed(0))
    origin = len(PROMPT) - len(PROMPT) % size
    for row in range(2):
        for index in (batch.targets[row] >= 0).nonzero().flatten().tolist():
            position = origin + index
            assert (position + 1) // size == position // size and position + 1 >= len(PROMPT)
            assert batch.noisy_ids[row, index + 1] == 5 and batch.targets[row, index] == seq.tokens[position + 1]


def _pairs(n: int = 24) -> list[tuple[list[int], list[int]]]:
    return [
        ([(7 * i + j) % 90 + 30 for j in range(6 + i % 5)], [(11 * i + 3 * j) % 90 + 30 for j in range(5 + i % 7)])
        for i in range(n)
    ]


def _recipe(**changes: Any) -> ConvertRecipe:
    fields: dict[str, Any] = dict(
        name="tiny-convert",
        tasks=["arith"],
        base="tiny-random-ar:1",
        mask_id=5,
        block_length=4,
        rank=4,
        alpha=8.0,
        steps=4,
        batch_size=4,
        learning_rate=1e-2,
        warmup_steps=1,
        validation_examples=4,
        validation_every=2,
        checkpoint_every=1,
    )
    return ConvertRecipe(**(fields | changes))


def test_an_interrupted_conversion_resumes_bit_identically(tmp_path, monkeypatch) -> None:
    base = tiny_random_ar(1)
    whole = train_conversion(_recipe(), base, _pairs(), tmp_path / "whole")
    monkeypatch.setattr(loop, "PART_BYTES", 2**16)  # the split run's state is saved and read in parts
    first = train_conversion(_recipe(), base, _pairs(), tmp_path / "split", stop_after_s=0.0)
    assert first["steps"] == 1 and not first["finished"]
    assert len(state_files(tmp_path / "split" / "train_state.pt")) > 2
    resumed = train_conversion(_recipe(), base, _pairs(), tmp_path / "split")
    assert resumed["finished"] and resumed["curve"] == [{**c, "seconds": c["seconds"]} for c in resumed["curve"]]
    assert [c["heldout_loss"] for c in resumed["curve"]] == [c["heldout_loss"] for c in whole["curve"]]
    a = load_converted(tmp_path / "whole" / "model", torch.float32, torch.device("cpu"))
    b = load_converted(tmp_path / "split" / "model", torch.float32, torch.device("cpu"))
    for (name, x), y in zip(adapter.lora_state(a.model).items(), adapter.lora_state(b.model).values()):
        assert torch.equal(x, y), name
    assert whole["curve"][-1]["heldout_loss"] < whole["curve"][0]["heldout_loss"] + 1.0


def test_a_finished_conversion_keeps_only_its_model_and_a_rerun_finds_it_done(tmp_path, monkeypatch) -> None:
    """A finished run removes its state (no file for a zoo folder to commit); the same recipe run again
    returns the recorded report without a step, and another recipe is refused, model/ untouched."""
    base = tiny_random_ar(1)
    monkeypatch.setattr(loop, "PART_BYTES", 2**16)  # the state is saved in parts until the end
    report = train_conversion(_recipe(), base, _pairs(), tmp_path)
    assert report["finished"] and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    saved = {p.name: p.read_bytes() for p in (tmp_path / "model").iterdir()}

    def no_step(*args, **kwargs):
        raise AssertionError("a finished conversion trained again")

    monkeypatch.setattr(convert_module, "diffusion_loss", no_step)
    assert train_conversion(_recipe(), base, _pairs(), tmp_path) == report
    with pytest.raises(UserError, match="finished conversion of a different recipe"):
        train_conversion(_recipe(steps=6), base, _pairs(), tmp_path)
    assert {p.name: p.read_bytes() for p in (tmp_path / "model").iterdir()} == saved


def test_a_conversion_starts_from_another_conversions_adapter(tmp_path) -> None:
    """`init_adapter`: a wider block length starts from a narrower one's adapter of the same base and
    rank (its matrices, not zeros); another rank is refused in one line, before any step."""
    base = tiny_random_ar(1)
    train_conversion(_recipe(), base, _pairs(), tmp_path / "b4")
    narrow = load_converted(tmp_path / "b4" / "model", torch.float32, torch.device("cpu"))
    wide = _recipe(block_length=8, init_adapter=str(tmp_path / "b4" / "model"))
    fresh = convert(base, mask_id=5, rank=4, alpha=8.0)
    start_from_adapter(fresh, wide, adapter.weights_hash(base.model))
    for (name, x), y in zip(adapter.lora_state(narrow.model).items(), adapter.lora_state(fresh.model).values()):
        assert torch.equal(x, y), name
    from_zeros = train_conversion(_recipe(block_length=8), base, _pairs(), tmp_path / "zeros", stop_after_s=0.0)
    started = train_conversion(wide, base, _pairs(), tmp_path / "b8", stop_after_s=0.0)
    assert started["steps"] == from_zeros["steps"] == 1
    with pytest.raises(UserError, match=r"rank 4.*rank 2"):
        train_conversion(dataclasses.replace(wide, rank=2), base, _pairs(), tmp_path / "r2")
    assert not (tmp_path / "r2").exists()
    with pytest.raises(UserError, match="not a converted target"):
        dataclasses.replace(wide, init_adapter=str(tmp_path / "missing")).check("recipe")


def test_a_resumed_conversion_with_another_recipe_is_refused(tmp_path) -> None:
    base = tiny_random_ar(1)
    train_conversion(_recipe(), base, _pairs(), tmp_path, stop_after_s=0.0)
    with pytest.raises(UserError, match="different recipe"):
        train_conversion(_recipe(learning_rate=5e-3), base, _pairs(), tmp_path)


def test_a_delta_over_other_base_weights_is_refused(tmp_path) -> None:
    target = convert(tiny_random_ar(1), mask_id=5, rank=4, alpha=8.0)
    meta = {
        "base": "tiny-random-ar:1",
        "base_hash": adapter.weights_hash(tiny_random_ar(1).model),
        "rank": 4,
        "alpha": 8.0,
    }
    save_converted(target, tmp_path / "model", meta)
    assert load_converted(tmp_path / "model", torch.float32, torch.device("cpu")).family.name == "converted"
    record = json.loads((tmp_path / "model" / CONVERTED_FILE).read_text())
    (tmp_path / "model" / CONVERTED_FILE).write_text(json.dumps(record | {"base": "tiny-random-ar:2"}))
    with pytest.raises(UserError, match="hash"):
        load_converted(tmp_path / "model", torch.float32, torch.device("cpu"))


def test_an_unknown_architecture_is_refused() -> None:
    from transformers import GPT2Config

    with pytest.raises(UserError, match="cannot convert model_type 'gpt2'"):
        model_config(GPT2Config(), "folder")


def test_every_recipe_field_is_read_from_yaml_and_an_unknown_key_is_one_line(tmp_path) -> None:
    (tmp_path / "init").mkdir()
    (tmp_path / "init" / CONVERTED_FILE).write_text("{}")  # what init_adapter's check looks for
    values = {
        "name": "every-field",
        "tasks": ["arith", "gsm8k"],
        "base": "tiny-random-ar:2",
        "mask_id": 7,
        "block_length": 8,
        "rank": 2,
        "alpha": 4.0,
        "seed": 3,
        "steps": 9,
        "batch_size": 2,
        "learning_rate": 0.5,
        "warmup_steps": 1,
        "weight_decay": 0.1,
        "grad_clip": 0.5,
        "prompt_max_tokens": 64,
        "answer_max_tokens": 32,
        "train_examples": 5,
        "validation_examples": 2,
        "validation_every": 3,
        "checkpoint_every": 4,
        "dtype": "bfloat16",
        "init_adapter": str(tmp_path / "init"),
    }
    fields = dataclasses.fields(ConvertRecipe)
    assert sorted(f.name for f in fields) == sorted(values)  # a new field gets a value here
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(values))
    recipe = ConvertRecipe.load(path)
    for f in fields:  # each value is not the field's default, so a field the loader drops fails
        assert getattr(recipe, f.name) == values[f.name] != f.default, f.name
    assert ConvertRecipe.load(path, steps=11).steps == 11
    path.write_text(yaml.safe_dump(values | {"block_lenght": 4}))
    with pytest.raises(UserError) as error:
        ConvertRecipe.load(path)
    assert "block_lenght" in str(error.value) and len(str(error.value).splitlines()) == 1


@pytest.mark.parametrize(
    "key, value", [("rank", "8"), ("alpha", 0), ("mask_id", 10**9), ("eos_id", -1), ("base", 3), ("rank", 5)]
)
def test_a_forged_record_is_one_line(tmp_path, key: str, value) -> None:
    target = convert(tiny_random_ar(1), mask_id=5, rank=4, alpha=8.0)
    meta = {
        "base": "tiny-random-ar:1",
        "base_hash": adapter.weights_hash(tiny_random_ar(1).model),
        "rank": 4,
        "alpha": 8.0,
    }
    save_converted(target, tmp_path / "model", meta)
    record = json.loads((tmp_path / "model" / CONVERTED_FILE).read_text())
    (tmp_path / "model" / CONVERTED_FILE).write_text(json.dumps(record | {key: value}))
    with pytest.raises(UserError) as error:
        load_converted(tmp_path / "model", torch.float32, torch.device("cpu"))
    assert len(str(error.value).splitlines()) == 1


def test_the_held_out_pairs_are_an_equal_share_of_each_tasks_first_pairs() -> None:
    from harness.training.convert import held_out_first

    first = [([1, i], [i]) for i in range(5)]
    second = [([2, i], [i]) for i in range(3)]
    pairs = held_out_first([first, second], 4)
    assert pairs[:4] == first[:2] + second[:2]
    assert pairs[4:] == first[2:] + second[2:]
    recipe = ConvertRecipe(name="r", tasks=["arith"], validation_examples=4, train_examples=10)
    assert recipe.samples_per_task == 14 and dataclasses.replace(recipe, train_examples=0).samples_per_task is None

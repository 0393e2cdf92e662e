"""train-drafter: the block layout matches the inference draft forward, and an interrupted run
resumes to the bit-identical drafter of an uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from harness.targets.ar import tiny_random_ar
from harness.training import loop
from proposers.psi.lora import META_FILE, WEIGHTS_FILE
from proposers.psi.training import DrafterRecipe, Sequence, layout, train_drafter
from spotbench.commands.train_drafter import task_pairs

RECIPE = """name: psi-tiny
base: tiny-random-ar
tasks: [arith]
rank: 2
curriculum: [2, 4]
steps: 4
batch_size: 2
train_examples: 8
checkpoint_every: 2
validation_prompts: 1
validation_every: 2
validation_width: 3
validation_gen_length: 6
"""


def test_layout_block_mask():
    sequence = Sequence(prompt=[5, 6, 7], response=[8, 9, 10, 11, 12])
    batch = layout([sequence], block=2, vocab_size=50, pad_id=0, generator=torch.Generator().manual_seed(0))
    clean = 8
    noisy_positions = batch.positions[0, clean:].tolist()
    assert noisy_positions == [3, 4, 5, 6]  # they stand for the response tokens that have a next token
    assert batch.gate[0].tolist() == [False] * clean + [True] * 4
    allowed = batch.allowed[0]
    assert torch.equal(allowed[:clean, :clean], torch.ones(clean, clean, dtype=torch.bool).tril())
    assert not allowed[:clean, clean:].any()  # clean rows never see noise: they are the base model's rows
    for row, q in enumerate(noisy_positions, start=clean):
        sees_clean = allowed[row, :clean].nonzero().flatten().tolist()
        start = len(sees_clean)  # the block starts right after the last clean row it sees
        assert sees_clean == list(range(start)) and 3 <= start <= q
        block = [clean + j for j, p in enumerate(noisy_positions) if start <= p < start + 2]
        assert allowed[row, clean:].nonzero().flatten().add(clean).tolist() == block
    assert batch.teacher[:, 1].tolist() == noisy_positions  # clean row q teaches the noisy row at q


@pytest.mark.slow
def test_resume_is_bit_identical(tmp_path, monkeypatch):
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(RECIPE)
    recipe = DrafterRecipe.load(recipe_path)
    target = tiny_random_ar(0)
    pairs = task_pairs(recipe, target)
    whole = train_drafter(recipe, target, pairs, tmp_path / "whole")

    calls = {"n": 0}
    real_step = loop.optimizer_step

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "optimizer_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_drafter(recipe, target, pairs, tmp_path / "resumed")
    monkeypatch.setattr(loop, "optimizer_step", real_step)
    resumed = train_drafter(recipe, target, pairs, tmp_path / "resumed")
    assert sorted(p.name for p in (tmp_path / "resumed").iterdir()) == [META_FILE, WEIGHTS_FILE]
    assert (tmp_path / "whole" / WEIGHTS_FILE).read_bytes() == (tmp_path / "resumed" / WEIGHTS_FILE).read_bytes()
    assert resumed["curve"] == whole["curve"] and [p["step"] for p in whole["curve"]] == [2, 4]
    assert whole["base_hash"] and whole["max_block"] == 4

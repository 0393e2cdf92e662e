"""train-drafter: the block layout matches the inference draft forward, and an interrupted run
resumes to the bit-identical drafter of an uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from harness.targets.ar import tiny_random_ar
from harness.training import loop
from proposers.psi.lora import META_FILE, WEIGHTS_FILE, GatedLoRAModel
from proposers.psi.training import DrafterRecipe, Sequence, layout, train_drafter, tv_loss
from tasks.registry import train_answers

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
    assert batch.clean_ids[0].tolist() == [5, 6, 7, 8, 9, 10, 11, 12]
    noisy_positions = batch.noisy_positions[0].tolist()
    assert noisy_positions == [3, 4, 5, 6]  # they stand for the response tokens that have a next token
    for row, q in enumerate(noisy_positions):
        sees_clean = batch.noisy_allowed[0, row, :clean].nonzero().flatten().tolist()
        start = len(sees_clean)  # the block starts right after the last clean row it sees
        assert sees_clean == list(range(start)) and 3 <= start <= q
        block = [j for j, p in enumerate(noisy_positions) if start <= p < start + 2]
        assert batch.noisy_allowed[0, row, clean:].nonzero().flatten().tolist() == block
    assert batch.teacher[:, 1].tolist() == noisy_positions  # clean row q teaches the noisy row at q


def inference_layout_loss(drafter, batch, sequences):
    """The loss from the draft forward's own layout, one block at a time: the block's noisy rows over
    the clean rows before it (gate on at the block only), teachers from a plain causal pass."""
    head, losses = drafter.model.get_output_embeddings(), []
    for row, seq in enumerate(sequences):
        clean = torch.tensor(seq.prompt + seq.response)
        teacher = drafter(None, input_ids=clean[None]).logits[0].softmax(-1)
        count = len(seq.response) - 1
        allowed = batch.noisy_allowed[row, :count]
        for j in range(count):
            before = int(allowed[j, : len(clean)].sum())
            block = allowed[j, batch.clean_ids.shape[1] :].nonzero().flatten()
            ids = torch.cat([clean[:before], batch.noisy_ids[row, block]])
            positions = torch.cat([torch.arange(before), batch.noisy_positions[row, block]])
            seen = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
            seen[before:, before:] = True
            gate = torch.zeros(1, len(ids), dtype=torch.bool)
            gate[0, before:] = True
            mask = torch.zeros(seen.shape, dtype=torch.float64).masked_fill(~seen, torch.finfo(torch.float64).min)
            hidden = drafter.hidden(
                gate, input_ids=ids[None], position_ids=positions[None], attention_mask=mask[None, None]
            )
            mine = before + int((block == j).nonzero())
            student = head(hidden[0, mine]).softmax(-1)
            q = int(batch.noisy_positions[row, j])
            losses.append((student - teacher[q]).abs().sum())
    return torch.stack(losses).mean()


def test_the_two_pass_loss_is_the_draft_forward_s_layout():
    target = tiny_random_ar(0).to("cpu", torch.float64)
    torch.manual_seed(0)
    drafter = GatedLoRAModel(target.model, rank=2, alpha=4.0)
    with torch.no_grad():
        for parameter in drafter.lora_state().values():
            parameter.normal_(0, 0.3)
    sequences = [Sequence([5, 6, 7], [8, 9, 10, 11, 12, 13]), Sequence([3, 4, 5, 6, 7], [20, 21, 22])]
    batch = layout(
        sequences, block=3, vocab_size=target.vocab_size, pad_id=0, generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        expected = inference_layout_loss(drafter, batch, sequences)
        assert abs(tv_loss(drafter, batch).item() - expected.item()) < 1e-10
        batch.noisy_allowed[0, 2, int(batch.noisy_positions[0, 2]) + 1] = True  # negative control: it sees its answer
        assert abs(tv_loss(drafter, batch).item() - expected.item()) > 1e-6


@pytest.mark.slow
def test_resume_is_bit_identical(tmp_path, monkeypatch):
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(RECIPE)
    recipe = DrafterRecipe.load(recipe_path)
    target = tiny_random_ar(0)
    pairs = train_answers(recipe.tasks, target.tokenizer, recipe.samples_per_task)
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

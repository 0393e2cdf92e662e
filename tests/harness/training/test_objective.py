"""The training layout must show the model exactly what `TargetSession` shows it at inference."""

import pytest
import torch

from harness.targets.families import family
from harness.targets.model import DLMTransformer
from harness.targets.target import DLMTarget
from harness.targets.tiny import tiny_config
from harness.training.objective import Example, layout_batch

MASK, PAD, EOS = 258, 256, 257
BLOCK = 8


def _model(family_name: str) -> DLMTransformer:
    torch.manual_seed(0)
    return DLMTransformer(tiny_config(family_name, 259)).double().eval()


def _example() -> Example:
    return Example(prompt=list(range(40, 51)), answer=list(range(60, 76)) + [EOS] * 8)


@pytest.mark.parametrize("family_name", ["llada", "dream", "sdar", "llada2"])
def test_training_logits_equal_session_logits(family_name: str) -> None:
    """Block 0 clean, block 1 partly masked, block 2 fully masked: the logits the loss reads for
    block 1 equal the session's logits for that state after block 0 was finished."""
    spec, model, example = family(family_name), _model(family_name), _example()
    answer = torch.tensor(example.answer)
    session = DLMTarget(model, spec, MASK, EOS).start(example.prompt, 3 * BLOCK, BLOCK)
    first = session.first_state()  # on the absolute grid of block-causal families: the prompt's tail first
    first_answer = int((first == MASK).sum())
    assert first_answer == (BLOCK - len(example.prompt) % BLOCK if spec.attention == "block_causal" else BLOCK)
    block1 = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0], dtype=torch.bool)
    rest = len(answer) - first_answer - BLOCK
    masked = torch.cat([torch.zeros(first_answer, dtype=torch.bool), block1, torch.ones(rest, dtype=torch.bool)])
    batch = layout_batch(
        [example, Example(list(range(30, 35)), example.answer)],
        torch.stack([masked, masked]),
        torch.tensor([0.5, 0.5]),
        spec,
        MASK,
        PAD,
        BLOCK,
    )
    logits, _ = model(batch.input_ids, batch.positions, batch.attend)

    session.finish_block(
        torch.where(first == MASK, torch.cat([first[: BLOCK - first_answer], answer[:first_answer]]), first)
    )
    block1_answer = answer[first_answer : first_answer + BLOCK]
    state = torch.where(block1, MASK, block1_answer)
    expected = session.forward(state[None]).current[0]

    prompt_len = len(example.prompt)
    if spec.attention == "block_causal":
        start = prompt_len + len(answer) + BLOCK
    else:
        start = prompt_len + BLOCK - (1 if spec.shifted_logits else 0)
    got = logits[0, start : start + BLOCK]
    assert torch.allclose(got, expected, atol=1e-10), (got - expected).abs().max()
    # the loss targets of block 1 are exactly its masked answer tokens, at these slots
    assert torch.equal(batch.targets[0, start : start + BLOCK][block1], block1_answer[block1])


def test_a_leaky_layout_is_caught() -> None:
    """Negative control: letting block 1 see block 2's clean tokens changes its logits."""
    spec, model, example = family("sdar"), _model("sdar"), _example()
    masked = torch.zeros(len(example.answer), dtype=torch.bool)
    masked[BLOCK : 2 * BLOCK] = True
    batch = layout_batch([example], masked[None], torch.tensor([0.5]), spec, MASK, PAD, BLOCK)
    honest, _ = model(batch.input_ids, batch.positions, batch.attend)
    batch.attend[0, 0, :, : len(example.prompt) + len(example.answer)] = True
    leaky, _ = model(batch.input_ids, batch.positions, batch.attend)
    start = len(example.prompt) + len(example.answer) + BLOCK
    assert not torch.allclose(honest[0, start : start + BLOCK], leaky[0, start : start + BLOCK])


@pytest.mark.parametrize("family_name", ["sdar", "llada2"])
def test_the_first_block_opens_with_the_prompts_tail(family_name: str) -> None:
    """Block-causal layouts put the answer on the absolute block grid: the first answer block shares
    its block with the prompt's last tokens, as the session's first pass does (the prefill included)."""
    spec, model, example = family(family_name), _model(family_name), _example()
    answer = torch.tensor(example.answer)
    tail = len(example.prompt) % BLOCK
    masked = torch.zeros(len(answer), dtype=torch.bool)
    masked[[0, 2, 3]] = True
    masked[BLOCK - tail :] = True
    batch = layout_batch([example], masked[None], torch.tensor([0.5]), spec, MASK, PAD, BLOCK)
    logits, _ = model(batch.input_ids, batch.positions, batch.attend)
    session = DLMTarget(model, spec, MASK, EOS).start(example.prompt, 3 * BLOCK, BLOCK)
    state = session.first_state()
    state[tail:] = torch.where(masked[: BLOCK - tail], MASK, answer[: BLOCK - tail])
    expected = session.forward(state[None]).current[0]
    start = len(example.prompt) + len(answer)  # the noisy copy starts at the prompt's last block
    assert torch.allclose(logits[0, start : start + BLOCK], expected, atol=1e-10)
    assert (batch.targets[0, start : start + tail] == -100).all()  # the prompt's tail is never a target

"""Target sessions: cached block passes equal full recomputes, batches equal single rows (a state
that sees another is caught), and Dream's shifted logits are read from the position before the one
they predict."""

from __future__ import annotations

import pytest
import torch

from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget, TargetSession

PROMPT = [72, 101, 108, 108, 111, 33]  # 6 tokens: the prompt ends mid-block for B = 4
BLOCK, BLOCKS = 4, 3


def _in_dtype(target: DLMTarget, dtype: torch.dtype) -> DLMTarget:
    """The same target in `dtype`, rows still evaluated as one batch."""
    return DLMTarget(
        target.model.to(dtype), target.family, target.mask_id, target.eos_id, target.tokenizer, target.name
    )


def _recompute(target: DLMTarget, finished: list[torch.Tensor], state: torch.Tensor, bidirectional=False):
    """The block's logits from one pass over everything, on the absolute block grid (block k holds
    positions [kB, (k+1)B)), without the session's cache: the prompt's whole blocks, the finished
    blocks (the first one opens with the prompt's tail) and the state."""
    whole = len(PROMPT) - len(PROMPT) % BLOCK
    tokens = torch.cat([torch.tensor(PROMPT[:whole]), *finished, state])
    ids = torch.arange(tokens.numel()) // BLOCK
    attend = None if bidirectional else ids[None, :] <= ids[:, None]
    logits, _ = target.model(tokens[None], torch.arange(tokens.numel()), attend)
    return logits[0, -BLOCK:]


@pytest.mark.parametrize("family", ["sdar", "llada2"])
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_cached_block_passes_equal_full_recompute(family, dtype, tolerance) -> None:
    target = _in_dtype(load_dlm_target(f"tiny-random:{family}:2"), dtype)
    session = target.start(PROMPT, BLOCK * BLOCKS, BLOCK)
    gen = torch.Generator().manual_seed(0)
    finished: list[torch.Tensor] = []
    worst = scale = 0.0
    assert session.first_state()[: len(PROMPT) % BLOCK].tolist() == PROMPT[-(len(PROMPT) % BLOCK) :]
    for block in range(BLOCKS):
        masks = session.first_state() if block == 0 else torch.full((BLOCK,), target.mask_id)
        partial = masks.clone()
        partial[(masks == target.mask_id).nonzero()[:1, 0]] = torch.randint(0, 256, (1,), generator=gen)
        for states in (torch.stack([masks, partial]), partial[None]):
            with torch.no_grad():
                got = session.forward(states).current
                for row, state in enumerate(states):
                    expected = _recompute(target, finished, state)
                    worst = max(worst, float((got[row] - expected).abs().max()))
                    scale = max(scale, float(expected.abs().max()))
                    if block == 0 and row == 0:  # negative control: the prompt must not see the block
                        leaky = _recompute(target, finished, state, bidirectional=True)
                        assert (got[row] - leaky).abs().max() > 1e-3
        final = torch.where(masks == target.mask_id, torch.randint(0, 256, (BLOCK,), generator=gen), masks)
        session.finish_block(final)
        finished.append(final)
    print(f"{family} {dtype}: cached vs recomputed max diff {worst:.2e} (max |logit| {scale:.1f})")
    assert worst <= tolerance * max(1.0, scale)  # float32 rounding grows with the logit scale
    assert session.nfe == 2 * BLOCKS  # the KV store rides on the next pass, never a pass of its own


def _batch_and_rows(target: DLMTarget, rows: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of `rows` candidate states evaluated as one batch, and one state per call, in two
    sessions with the same history (one earlier pass, so block-causal caches are warm)."""
    gen = torch.Generator().manual_seed(1)
    states = torch.full((rows, BLOCK), target.mask_id)
    for row in range(1, rows):
        states[row, : row % BLOCK] = torch.randint(0, 256, (row % BLOCK,), generator=gen)
    batch_session = target.start(PROMPT, 2 * BLOCK, BLOCK)
    row_session = target.start(PROMPT, 2 * BLOCK, BLOCK)
    for session in (batch_session, row_session):
        session.forward(states[:1])
    batch = batch_session.forward(states).current
    single = torch.cat([row_session.forward(states[row : row + 1]).current for row in range(rows)])
    return batch, single


@pytest.mark.parametrize("family", ["llada", "dream", "sdar", "llada2", "converted"])
def test_a_batch_gives_the_logits_of_single_rows(family):
    target = load_dlm_target(f"tiny-random:{family}:4")
    batch, single = _batch_and_rows(target)
    print(f"{family} float32: batch vs single rows max diff {(batch - single).abs().max():.2e}")
    assert (batch - single).abs().max() <= 1e-4
    batch, single = _batch_and_rows(_in_dtype(load_dlm_target(f"tiny-random:{family}:4"), torch.float64))
    assert (batch - single).abs().max() <= 1e-12
    batch, single = _batch_and_rows(target.exact())
    assert torch.equal(batch, single)


@pytest.mark.parametrize("family", ["sdar", "converted"])
def test_a_state_that_sees_another_state_is_caught(family, monkeypatch):
    """Defect: the states of a block-causal pass, laid out in one row, attend to each other's keys.
    A state alone sees only itself, so single rows cannot tell; the batch must."""
    real = TargetSession.causal_inputs

    def leaky(self, states):
        tokens, positions, attend, adapted = real(self, states)
        attend = attend.clone()
        attend[self.pending :, attend.shape[1] - states.numel() :] = True
        return tokens, positions, attend, adapted

    monkeypatch.setattr(TargetSession, "causal_inputs", leaky)
    batch, single = _batch_and_rows(_in_dtype(load_dlm_target(f"tiny-random:{family}:4"), torch.float64))
    assert (batch - single).abs().max() > 1e-6


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_shifted_logits_come_from_the_previous_position(family):
    """Dream's logit for answer position i is the model output at i - 1 (the last prompt token
    predicts the first answer token); LLaDA's is the output at i."""
    target = load_dlm_target(f"tiny-random:{family}:5").exact()
    session = target.start(PROMPT, 2 * BLOCK, BLOCK)
    state = torch.tensor([[target.mask_id, 65, target.mask_id, 66]])
    out = session.forward(state)
    tokens = torch.cat([torch.tensor(PROMPT), state[0], torch.full((BLOCK,), target.mask_id)])
    logits, _ = target.model(tokens[None], torch.arange(tokens.numel()), None)
    shift = 1 if family == "dream" else 0
    start = len(PROMPT) - shift
    assert torch.equal(out.current[0], logits[0, start : start + BLOCK])
    assert torch.equal(out.following[0], logits[0, start + BLOCK : start + 2 * BLOCK])
    other = len(PROMPT) - (1 - shift)  # negative control: the other convention reads other rows
    assert not torch.allclose(out.current[0], logits[0, other : other + BLOCK])

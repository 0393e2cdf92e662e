"""A saved training state: round trip, parts under the size limit, and no broken state after a fault."""

from __future__ import annotations

import pytest
import torch

from harness.errors import UserError
from harness.training import loop
from harness.training.loop import read_state, remove_state, save_state, state_files


def state(seed: int) -> dict:
    return {"step": seed, "weights": torch.randn(20_000, generator=torch.Generator().manual_seed(seed))}


def same(a: dict, b: dict) -> bool:
    return a["step"] == b["step"] and torch.equal(a["weights"], b["weights"])


def test_a_small_state_is_one_file_torch_reads(tmp_path):
    path = tmp_path / "train_state.pt"
    save_state(path, state(1))
    assert state_files(path) == [path]
    assert same(torch.load(path, weights_only=False), state(1))


def test_a_large_state_is_saved_in_parts_no_larger_than_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "PART_BYTES", 30_000)
    path = tmp_path / "train_state.pt"
    save_state(path, state(1))
    parts = [p for p in state_files(path) if p != path]
    assert len(parts) == 3 and all(p.stat().st_size <= 30_000 for p in parts)
    assert same(read_state(path), state(1))
    save_state(path, state(2))  # the first state's parts go once the second is in place
    assert len(state_files(path)) == 4 and not set(parts) & set(state_files(path))
    assert same(read_state(path), state(2))
    remove_state(path)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_or_changed_part_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "PART_BYTES", 30_000)
    path = tmp_path / "train_state.pt"
    save_state(path, state(1))
    part = sorted(p for p in state_files(path) if p != path)[1]
    data = bytearray(part.read_bytes())
    data[100] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(UserError, match="parts do not match"):
        read_state(path)
    part.unlink()
    with pytest.raises(UserError, match="a part is missing"):
        read_state(path)


def test_a_save_interrupted_while_writing_parts_leaves_the_previous_state(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "PART_BYTES", 30_000)
    path = tmp_path / "train_state.pt"
    save_state(path, state(1))
    written = []
    real = loop._replace

    def crash_on_the_third_file(target, data):
        written.append(target)
        if len(written) == 3:
            raise KeyboardInterrupt
        real(target, data)

    monkeypatch.setattr(loop, "_replace", crash_on_the_third_file)
    with pytest.raises(KeyboardInterrupt):
        save_state(path, state(2))
    assert same(read_state(path), state(1))

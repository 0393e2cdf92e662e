"""The SPOT family's one training loop (`proposers.spot.loop`), on a toy network: an interrupted run
resumes bit for bit with what the method keeps beside the network, and a run folder of another recipe
is refused."""

from dataclasses import dataclass

import pytest
import torch

from harness.errors import UserError
from proposers.spot.loop import Extras, Run, train_steps


@dataclass(frozen=True)
class Recipe:
    name: str = "toy"
    steps: int = 6
    batch_size: int = 4
    learning_rate: float = 0.1
    warmup_steps: int = 1
    weight_decay: float = 0.01
    depth_decay: float = 0.5
    checkpoint_every: int = 2


class Interrupted(Exception):
    pass


def toy_run(tmp_path, name: str, stop_after: int | None = None) -> tuple[torch.nn.Linear, list[int], list]:
    """A linear fit of 16 examples; the extras count the steps taken (saved and restored with the state)
    and, with `stop_after`, interrupt the run after that step."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    inputs, targets = torch.randn(16, 3), torch.randn(16, 1)
    counted, started = [0], []

    def start(state, step):
        started.append(None if state is None else (state["counted"], step))
        counted[0] = state["counted"] if state is not None else 0

    def after_step(step):
        counted[0] += 1
        if step == stop_after:
            raise Interrupted

    extras = Extras(start, after_step, lambda: {"counted": counted[0]})
    run = Run(net, list(net.parameters()), 0, tmp_path / name / "train_state.pt", extras)
    (tmp_path / name).mkdir(exist_ok=True)
    train_steps(Recipe(), run, torch.arange(16) % 4, lambda i: (net(inputs[i]) - targets[i]).square().mean())
    return net, counted, started


def test_an_interrupted_run_resumes_bit_for_bit_with_its_extras(tmp_path) -> None:
    whole, counted, started = toy_run(tmp_path, "whole")
    assert counted == [6] and started == [None]
    with pytest.raises(Interrupted):
        toy_run(tmp_path, "cut", stop_after=3)  # its last checkpoint is step 2
    resumed, counted, started = toy_run(tmp_path, "cut")
    assert started == [(2, 2)] and counted == [6]  # restored at the checkpoint, not at the interruption
    assert all(torch.equal(a, b) for a, b in zip(whole.parameters(), resumed.parameters()))
    # negative control: a resume that restored another example order would end elsewhere
    with pytest.raises(Interrupted):
        toy_run(tmp_path, "reordered", stop_after=3)
    path = tmp_path / "reordered" / "train_state.pt"
    state = torch.load(path, weights_only=False)
    torch.save(state | {"order": torch.Generator().manual_seed(99).get_state()}, path)
    reordered, _, _ = toy_run(tmp_path, "reordered")
    assert not all(torch.equal(a, b) for a, b in zip(whole.parameters(), reordered.parameters()))


def test_a_run_folder_of_another_recipe_is_refused(tmp_path) -> None:
    toy_run(tmp_path, "run")
    net = torch.nn.Linear(3, 1)
    other = Run(net, list(net.parameters()), 0, tmp_path / "run" / "train_state.pt")
    with pytest.raises(UserError, match="holds a run of a different recipe; use a new --run-dir"):
        train_steps(Recipe(steps=7), other, torch.zeros(16), lambda i: net(torch.ones(len(i), 3)).sum())

"""Replaying speculative decoding on a recorded plain generation: a proposer's passes, no target.

Why this is exact: the verifier enters a draft node only when its transition equals the target's
own, so every row it walks holds a state of the plain trajectory, the target's transition there is
the plain step, and the next stale view is the plain pass's logits at that state. How many passes a
proposer saves therefore depends only on the plain trajectory and the logits plain decoding computed
along it. One `plain_decode(..., keep_logits=True)` per prompt lets every (proposer, budget) arm be
scored without a target pass: minutes of decoding become seconds, which is what a study of many
checkpoints on many targets needs.

Replay runs the one block loop (`speculative_decode`) against a `RecordedTarget`, which answers a
pass with the recorded logits of each row's state. A row off the plain trajectory gets NaN logits: the
walk never enters it, and if it did the replayed trajectory would leave the plain one, which `replay`
refuses. It equals real speculative decoding wherever a state's logits do not depend on the batch it
was evaluated in (the exactness mode; tests/harness/decoding/test_replay.py checks it for every
registered proposer). It measures passes only: exactness, wall time and scores need real decoding.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from harness.decoding.generation import DecodeConfig, Generation
from harness.decoding.speculative import speculative_decode
from harness.decoding.tree import Proposer
from harness.targets.target import BlockLogits


class RecordedTarget:
    """The target as far as a recorded plain generation knows it: the logits of its trajectory's states."""

    def __init__(self, plain: Generation, mask_id: int):
        if plain.pass_logits is None or plain.following is None:
            raise ValueError("replay needs a plain generation decoded with keep_logits=True")
        self.plain, self.mask_id, self.eos_id = plain, mask_id, plain.eos_id
        self.vocab_size = plain.pass_logits[0].shape[-1]
        self.device = plain.pass_logits[0].device  # where its noise is drawn (`noise_device`)
        self.known: dict[tuple[int, bytes], int] = {}  # (block, state) -> the step taken from it
        self.unknown = torch.full_like(plain.pass_logits[0], float("nan"))
        self.blocks = plain.blocks(mask_id)
        for block in self.blocks:
            for step, state in zip(range(block.first, block.end), block.states(plain.steps)):
                self.known[block.index, state.numpy().tobytes()] = step

    def start(self, prompt_ids: object, gen_length: int, block_length: int) -> RecordedSession:
        return RecordedSession(self)


class RecordedRows:
    """A pass's [N, B, V] logits as the block loop reads them, row by row: the recorded tensors
    themselves. Why not one stacked tensor: a row of a real target is B x V floats (3 MB on SmolLM2 at
    block 16), and copying every row of every tree made replaying an arm cost 8% of the decode it
    stands for, while the loop reads one or two rows of most trees."""

    is_cuda = False

    def __init__(self, rows: list[Tensor]):
        self.rows = rows

    def __getitem__(self, row: int) -> Tensor:
        return self.rows[row]


class RecordedSession:
    def __init__(self, target: RecordedTarget):
        self.target = target
        self.block_index = self.nfe = self.rows = 0
        self.finished: list[Tensor] = []

    def first_state(self) -> Tensor:
        return self.target.blocks[0].start.clone()

    def forward(self, states: Tensor) -> BlockLogits:
        self.nfe += 1
        self.rows += states.shape[0]
        pass_logits, all_following = self.target.plain.pass_logits, self.target.plain.following
        assert pass_logits is not None and all_following is not None  # replay takes a plain run with its logits
        steps = [self.target.known.get((self.block_index, s.numpy().tobytes())) for s in states]
        current = RecordedRows([self.target.unknown if s is None else pass_logits[s] for s in steps])
        following = all_following[self.block_index] if self.block_index < len(all_following) else None
        # the loop reads rows one at a time (`current[row]`): a recorded row is handed over, never copied
        return BlockLogits(cast(Tensor, current), None if following is None else following.expand(len(steps), -1, -1))

    def finish_block(self, state: Tensor) -> bool:
        """The recorded generation ended after its last finished block."""
        self.finished.append(state.clone())
        self.block_index += 1
        return self.block_index == len(self.target.blocks)

    def answer(self) -> Tensor:
        return torch.cat(self.finished)[int((self.target.blocks[0].start != self.target.mask_id).sum()) :]


def replay(plain: Generation, proposer: Proposer, config: DecodeConfig, budget: int) -> Generation:
    """The speculative generation `proposer` would give at `budget`: its passes, commits and stops."""
    target = RecordedTarget(plain, config.rule.mask_id)
    generation = speculative_decode(target, [0], proposer, config, budget)  # type: ignore[arg-type]
    generation.answer_length = plain.answer_length
    if generation.steps != plain.steps:
        raise ValueError(
            "the replay left the recorded plain trajectory: the plain generation is not this "
            "config's (rule, temperature, seed, geometry)"
        )
    return generation

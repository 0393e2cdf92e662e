"""The target as the decoding code sees it: one generation, evaluated block by block.

A `TargetSession` holds everything that is fixed during a generation (the prompt, the finished blocks
and, for block-causal families, their key/value cache). Its only operation is `forward`: one target
pass over a batch of candidate states of the current block. Plain decoding calls it with one row;
speculative decoding with the root plus every draft node. The session counts passes (`nfe`) and rows
itself, so every decoding arm is accounted the same way.

Block grids follow each family's published `generate` (docs/checkpoints.md). Block-causal families
(SDAR, LLaDA2) lay blocks on absolute positions from 0: block k is positions [kB, (k+1)B). When the
prompt length P is not a multiple of B, the first decoded block starts at floor(P/B)*B and holds the
prompt's last P mod B tokens, already committed, before its masks (`first_state`); decoding runs to
the end of the block holding position P + gen_length - 1, so any positive gen_length is allowed.
Full-attention families (LLaDA, Dream) start the first block at the answer, as LLaDA's `generate`
does, and need gen_length to be a multiple of B.

Block-causal families store a finished block's keys/values by fusing that store with the next block's
first pass (the pending tokens are prepended to the rows). This is exact because a finished block
cannot see later blocks, and it costs no extra pass. The prompt's whole blocks are pending at the
start, so the first pass of a generation is also its prefill. The keys and values live in the
session's slot of the target's store (`harness.targets.kv_store`): a pass writes its new tokens'
keys after the stored ones and attends over the slot in place; the pending tokens come first in the
pass, so storing them is only counting them, and the states' keys after them are scratch.

Full-attention families recompute prompt + answer on every pass, with future blocks all masked, as
LLaDA's and Dream's reference decoders do. Such a pass also yields logits for the next block, returned
as `BlockLogits.following`, which become the proposer's first stale view of that block.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from harness.errors import UserError
from harness.targets.batching import pad_block_causal, pad_full
from harness.targets.families import FamilySpec
from harness.targets.kv_store import KVStore, PassCache
from harness.targets.model import DLMTransformer


@dataclass
class BlockLogits:
    current: Tensor
    """[N, B, V] logits for the positions of the current block, one row per evaluated state."""
    following: Tensor | None
    """[N, B, V] logits for the next block (full-attention families, when a next block exists)."""


class DLMTarget:
    """A diffusion LM with its family conventions, token ids and tokenizer."""

    def __init__(
        self,
        model: DLMTransformer,
        family: FamilySpec,
        mask_id: int,
        eos_id: int,
        tokenizer: Any = None,
        name: str = "",
        rowwise: bool = False,
    ):
        self.model = model.eval()
        self.family = family
        self.mask_id = mask_id
        self.eos_id = eos_id
        self.tokenizer = tokenizer
        self.name = name
        self.rowwise = rowwise
        """Evaluate the rows of a pass one at a time: every row then sees the same kernels as a
        single-row plain pass, so its logits do not depend on the batch it was evaluated in."""
        self.store = KVStore(model.cfg.num_layers)
        """Block-causal families: every session's stored keys and values (`harness.targets.kv_store`)."""

    @property
    def vocab_size(self) -> int:
        return self.model.cfg.vocab_size

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> DLMTarget:
        """The same target with its weights on `device` (and in `dtype`), in place."""
        self.model.to(device=device, dtype=dtype)
        return self

    def exact(self) -> DLMTarget:
        """Exactness mode (DESIGN.md section 3): float64 weights and row-by-row evaluation, on the same
        device. Row by row, every verification row runs the kernels of a one-row plain pass, so its
        logits equal the plain pass's bitwise. On a GPU the kernels must also be deterministic (no
        split-K reductions that depend on scheduling): cuBLAS gets a fixed workspace and torch its
        deterministic algorithms; float64 attention runs on the math backend."""
        if self.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        model = copy.deepcopy(self.model).to(torch.float64)
        return DLMTarget(model, self.family, self.mask_id, self.eos_id, self.tokenizer, self.name, rowwise=True)

    def start(self, prompt_ids: list[int] | Tensor, gen_length: int, block_length: int) -> TargetSession:
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long, device=self.device)
        return TargetSession(self, prompt, gen_length, block_length)

    def forward_many(self, passes: Sequence[tuple[TargetSession, Tensor]]) -> list[BlockLogits]:
        """One target pass over the states of several generations (`forward_sessions`)."""
        return forward_sessions(passes)


class TargetSession:
    """One generation of one prompt (see the module docstring)."""

    def __init__(self, target: DLMTarget, prompt: Tensor, gen_length: int, block_length: int):
        if prompt.ndim != 1 or prompt.numel() == 0:
            raise UserError("the prompt must be a non-empty sequence of token ids")
        check_geometry(target.family, gen_length, block_length)
        self.target = target
        self.prompt = prompt
        self.block_length = block_length
        self.block_index = 0
        self.finished: list[Tensor] = []
        self.nfe = 0
        self.rows = 0
        self._cache_len = 0
        """Block-causal: positions of the session's slot of the target's store that hold keys."""
        self._before_block: Tensor | None = None
        """Shifted block-causal targets: [1, 1, V] logits of the position before the current block."""
        if target.family.attention == "block_causal":
            self.slot = target.store.lease(self)
            self.prompt_in_block = prompt.numel() % block_length
            self._origin = prompt.numel() - self.prompt_in_block
            self.num_blocks = -(-(prompt.numel() + gen_length) // block_length) - self._origin // block_length
        else:
            self.prompt_in_block, self._origin = 0, prompt.numel()
            self.num_blocks = gen_length // block_length
        self._pending = prompt[: self._origin]  # block-causal: the prompt's whole blocks, the first pass's prefill

    def first_state(self) -> Tensor:
        """The first block's state before any commit (on the CPU): the prompt's tokens that share the
        block (block-causal grid), then masks. Every later block starts all masked."""
        state = torch.full((self.block_length,), self.target.mask_id, dtype=torch.long)
        state[: self.prompt_in_block] = self.prompt[self._origin :].cpu()
        return state

    @property
    def block_start(self) -> int:
        """Absolute position of the current block's first token."""
        return self._origin + self.block_index * self.block_length

    def forward(self, states: Tensor) -> BlockLogits:
        """One target pass over candidate states [N, B] of the current block."""
        states = self.admit(states)
        with torch.inference_mode():
            return self._evaluate(states)

    def admit(self, states: Tensor) -> Tensor:
        """Check and count one pass over `states` (the session's own `nfe` and `rows`, also when the
        pass is shared with other generations: `forward_sessions`); the states on the target's device."""
        if states.ndim != 2 or states.shape[1] != self.block_length:
            raise ValueError(f"states must be [N, {self.block_length}], got {tuple(states.shape)}")
        if self.block_index >= self.num_blocks:
            raise ValueError("the generation has no block left to evaluate")
        self.nfe += 1
        self.rows += states.shape[0]
        return states.to(self.prompt.device)

    def _evaluate(self, states: Tensor) -> BlockLogits:
        forward = self._block_causal if self.target.family.attention == "block_causal" else self._full
        if not self.target.rowwise:
            return forward(states)
        parts = [forward(states[i : i + 1]) for i in range(states.shape[0])]
        following = [p.following for p in parts]
        return BlockLogits(
            torch.cat([p.current for p in parts]),
            None if following[0] is None else torch.cat(cast(list[Tensor], following)),  # all or none
        )

    def finish_block(self, final_state: Tensor) -> bool:
        """Record the committed tokens of the current block and move to the next one; True when the
        answer is complete (an EOS among the block's answer positions, or the last block)."""
        if (final_state == self.target.mask_id).any():
            raise ValueError("a block can only be finished once every position is committed")
        final_state = final_state.to(self.prompt.device)
        answer = final_state[self.prompt_in_block if self.block_index == 0 else 0 :]
        self.finished.append(final_state.clone())
        if self.target.family.caches_finished_blocks:
            self._pending = torch.cat([self._pending, final_state])
        self.block_index += 1
        return bool((answer == self.target.eos_id).any()) or self.block_index == self.num_blocks

    def answer(self) -> Tensor:
        """The committed answer tokens so far (finished blocks only, without the prompt's tail), on the CPU."""
        return (torch.cat(self.finished) if self.finished else self.prompt[:0])[self.prompt_in_block :].cpu()

    def _full(self, states: Tensor) -> BlockLogits:
        tokens = self.full_tokens(states)
        logits, _ = self.target.model(tokens, torch.arange(tokens.shape[1], device=states.device), attend=None)
        return self.full_logits(logits)

    def full_tokens(self, states: Tensor) -> Tensor:
        """Full attention: the rows of a pass, [N, prompt + every block], future blocks all masked."""
        rows, size = states.shape
        future = (self.num_blocks - self.block_index - 1) * size
        prefix = torch.cat([self.prompt, *self.finished])
        masks = torch.full((rows, future), self.target.mask_id, dtype=torch.long, device=states.device)
        return torch.cat([prefix.expand(rows, -1), states, masks], dim=1)

    def full_logits(self, logits: Tensor) -> BlockLogits:
        """Full attention: the current (and next) block's logits out of a pass's [N, L, V]."""
        size = self.block_length
        start = self.block_start - (1 if self.target.family.shifted_logits else 0)
        future = self.block_index + 1 < self.num_blocks
        return BlockLogits(
            logits[:, start : start + size], logits[:, start + size : start + 2 * size] if future else None
        )

    def _block_causal(self, states: Tensor) -> BlockLogits:
        return _causal_together(self.target, [self], [self.causal_inputs(states)])[0]

    @property
    def pending(self) -> int:
        """Block-causal: how many tokens the next pass stores (the previous block, or the prompt's whole
        blocks at the first pass), before its states."""
        return self._pending.numel()

    @property
    def cached(self) -> int:
        """Block-causal: how many positions the session has stored."""
        return self._cache_len

    def causal_inputs(self, states: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Block-causal: a pass's new tokens as ONE row after the stored prefix, so the prefix's keys and
        values are read once however many states the pass has: tokens [1, T] (the pending tokens, then
        the N states one after another), positions [T] (every state at the block's own positions),
        attend [T, C + T] over the C stored keys and the T new ones, and for converted targets the
        tokens the adapter is on at, [1, T]. A state's tokens see the prefix, the pending tokens and
        their own state, never another state's: each sees exactly what it would alone."""
        count, size = states.shape
        tokens = torch.cat([self._pending, states.reshape(-1)])[None]
        layout = _causal_layout(
            self._cache_len,
            self._pending.numel(),
            count,
            size,
            self.block_start,
            self.block_length,
            self.target.family.causal_context,
            states.device,
        )
        return (tokens, *layout)

    def head_from(self) -> int:
        """Block-causal: the first row of this pass's one row whose logits are read: the first state's,
        or for shifted families the last pending token's (it predicts the block's first token). The
        pending tokens' other rows predict tokens already known; on a prompt's first pass that is most
        of the output head's work, skipped."""
        pending = self._pending.numel()
        return pending - 1 if pending and self.target.family.shifted_logits else pending

    def causal_logits(self, logits: Tensor) -> BlockLogits:
        """Block-causal: the states' logits [N, B, V] out of the output head's rows [R, V] from
        `head_from` on. The pass wrote the pending tokens' keys and values right after the stored
        ones in the session's slot: they are stored now, and the states' after them are scratch."""
        size, pending = self.block_length, self._pending.numel()
        shifted = self.target.family.shifted_logits
        current = self._shift(logits, pending) if shifted else logits.unflatten(0, (-1, size))
        self._cache_len += pending
        self._pending = self._pending[:0]
        return BlockLogits(current, None)

    def _shift(self, logits: Tensor, pending: int) -> Tensor:
        """Shifted logits on the block grid: position i-1 predicts token i, so the block's first
        token is predicted by the last token before the block. That row cannot see the block, so its
        logits are taken from the block's first pass (where it is pending: the previous block or the
        prompt's whole blocks) and kept for the block's later passes. A block that starts at position
        0 begins with a prompt token, never predicted: its row is zeros. (A state's last row predicts
        nothing in its block; the head still runs on it, since on CPUs a matmul over 2-3 rows can cost
        twice one over 4.)"""
        if pending:
            self._before_block, logits = logits[None, :1], logits[1:]
        elif self._before_block is None:
            self._before_block = logits.new_zeros((1, 1, logits.shape[-1]))
        states = logits.unflatten(0, (-1, self.block_length))
        first = self._before_block.expand(states.shape[0], -1, -1)
        return torch.cat([first, states[:, :-1]], dim=1)


def forward_sessions(passes: Sequence[tuple[TargetSession, Tensor]]) -> list[BlockLogits]:
    """One target pass over candidate states [n_i, B] of several generations of one target, each
    counted as a pass of its own session (its `nfe` and `rows` are those of its batch-1 decode).

    In exactness mode (`DLMTarget.rowwise`) every row of every generation is evaluated alone, with
    the kernels and shapes of its batch-1 pass, so its logits are its batch-1 logits bit for bit.
    Otherwise the rows of all generations go through the model together, padded to a common shape
    (`harness.targets.batching`); a block-causal generation is one row (`causal_inputs`), and the
    generations are grouped by their number of pending tokens (the finished block, or the prompt's
    whole blocks at the first pass), so the block passes of most generations are not padded to the
    length of a few KV-store passes. A generation alone in its group takes its own pass, unpadded."""
    sessions = [session for session, _ in passes]
    if len({id(s.target) for s in sessions}) > 1:
        raise ValueError("a batched pass evaluates generations of one target")
    states = [session.admit(s) for session, s in passes]
    target = sessions[0].target
    with torch.inference_mode():
        if target.rowwise or len(passes) == 1:
            return [session._evaluate(s) for session, s in zip(sessions, states)]
        if target.family.attention != "block_causal":
            return _full_together(target, sessions, states)
        inputs = [session.causal_inputs(s) for session, s in zip(sessions, states)]
        groups: dict[int, list[int]] = {}
        for index, session in enumerate(sessions):
            groups.setdefault(session.pending, []).append(index)
        out: list[BlockLogits | None] = [None] * len(passes)
        for members in groups.values():
            members.sort(key=lambda i: sessions[i].slot)  # consecutive slots are read as a view
            for index, logits in zip(
                members, _causal_together(target, [sessions[i] for i in members], [inputs[i] for i in members])
            ):
                out[index] = logits
        return cast(list[BlockLogits], out)  # every pass is in one group


def _full_together(target: DLMTarget, sessions: list[TargetSession], states: list[Tensor]) -> list[BlockLogits]:
    rows = [session.full_tokens(s) for session, s in zip(sessions, states)]
    tokens, attend = pad_full(rows, target.mask_id)
    logits, _ = target.model(tokens, torch.arange(tokens.shape[1], device=tokens.device), attend)
    out, start = [], 0
    for session, r in zip(sessions, rows):
        out.append(session.full_logits(logits[start : start + r.shape[0], : r.shape[1]]))
        start += r.shape[0]
    return out


def _causal_together(
    target: DLMTarget, sessions: list[TargetSession], inputs: list[tuple[Tensor, Tensor, Tensor, Tensor | None]]
) -> list[BlockLogits]:
    """One model call over block-causal generations, one row each (padded when several), over their
    slots of the target's store, then one output-head call over the rows they read
    (`TargetSession.head_from`)."""
    cached = [s.cached for s in sessions]
    lengths = [tokens.shape[1] for tokens, _, _, _ in inputs]
    if len(sessions) == 1:
        tokens, positions, attend, adapted = inputs[0]
    else:
        tokens, positions, attend, adapted = pad_block_causal(inputs, cached, target.mask_id)
    cache = PassCache(
        target.store, [s.slot for s in sessions], cached, lengths, tokens.shape[1], contiguous=target.rowwise
    )
    hidden, _ = target.model.hidden(tokens, positions, attend, cache, adapted)
    read = [hidden[i, s.head_from() : t] for i, (s, t) in enumerate(zip(sessions, lengths))]
    logits = target.model.lm_head(torch.cat(read)).split([r.shape[0] for r in read])
    return [session.causal_logits(rows) for session, rows in zip(sessions, logits)]


@functools.lru_cache(maxsize=256)
def _causal_layout(
    cached: int,
    pending: int,
    count: int,
    size: int,
    block_start: int,
    block_length: int,
    causal_context: bool,
    device: torch.device,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """`TargetSession.causal_inputs` without the tokens: positions, attend and adapted depend only on
    the geometry, which every pass of a block after its first shares, so they are built once
    (the tensors are only read: padding copies them, the model reads them)."""
    stored = torch.arange(cached + pending, device=device)
    positions = torch.cat([stored[cached:], block_start + torch.arange(size, device=device).repeat(count)])
    keys = torch.cat([stored[:cached], positions])
    owner = torch.cat(
        [torch.full((pending,), -1, device=device), torch.arange(count, device=device).repeat_interleave(size)]
    )
    key_owner = torch.cat([torch.full((cached,), -1, device=device), owner])
    shared = (key_owner[None, :] == -1) | (key_owner[None, :] == owner[:, None])
    block_ids = keys // block_length
    same_or_earlier = block_ids[None, :] <= block_ids[positions][:, None]
    adapted = None
    if causal_context:  # clean rows causal with the base weights, the block adapted
        active = positions >= block_start
        attend = (keys[None, :] <= positions[:, None]) | (same_or_earlier & active[:, None])
        adapted = active[None]
    else:
        attend = same_or_earlier
    return positions, attend & shared, adapted


def check_geometry(family: FamilySpec, gen_length: int, block_length: int) -> None:
    """The gen_length a family's published `generate` accepts: any positive length on the absolute
    block grid, a multiple of the block length where blocks start at the answer."""
    if block_length <= 0 or gen_length <= 0:
        raise UserError(f"gen_length ({gen_length}) and block_length ({block_length}) must be positive")
    if family.attention != "block_causal" and gen_length % block_length:
        raise UserError(
            f"gen_length ({gen_length}) must be a multiple of block_length ({block_length}) for "
            f"{family.name} targets, whose blocks start at the answer; change one of them"
        )

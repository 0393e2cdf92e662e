"""The keys and values of every generation of a target, in one preallocated store.

A generation (`ARSession`, or a block-causal `TargetSession`) owns a slot: positions [0, cached) of
the slot hold its committed context. A pass writes its new tokens' keys and values straight into
each slot after the committed ones and attends over the slots as they are, so a batched pass copies
no generation's cache into the batch (the rows of the pass are a view of the store when their slots
are consecutive, else one gather of those rows) and no cache is rebuilt after it: an autoregressive
commit moves at most the accepted path's own few columns, a block-causal one only counts the pending
tokens it stored, and keys nobody committed are simply overwritten by the next pass.

Layout: keys and values [layers, slots, kv_heads, capacity, head_dim], allocated on the first write
(heads, dim, dtype and device come from the model's own keys) and grown, with one copy, when a pass
needs more slots or positions (capacity in steps of `CAPACITY_STEP`). A slot is freed when its
session is garbage collected and then reused, so a job's store holds as many slots as it ever had
generations alive at once. The buffers are inference tensors: every method that writes them runs in
`torch.inference_mode`.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

KV = tuple[Tensor, Tensor]
CAPACITY_STEP = 256
"""Positions are allocated in multiples of this: a store grows a few times per job, not per token."""


class KVStore:
    """Slots of keys and values for the generations of one model (see the module docstring)."""

    def __init__(self, layers: int):
        self.layers = layers
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.slots = 0
        """Slots handed out so far (taken or free); the buffers hold at least the ones written."""
        self._free: list[int] = []
        self._wanted = (0, 0)
        """(slots, positions) the next write must fit."""

    def take(self) -> int:
        """A free slot, the lowest one, so the live generations stay packed at the front."""
        if self._free:
            return heapq.heappop(self._free)
        self.slots += 1
        return self.slots - 1

    def release(self, slot: int) -> None:
        heapq.heappush(self._free, slot)

    def lease(self, owner: object) -> int:
        """A slot for `owner` (a session), given back when the owner is garbage collected."""
        slot = self.take()
        weakref.finalize(owner, self.release, slot)
        return slot

    def reserve(self, slots: int, positions: int) -> None:
        """The next writes need slots [0, slots) and positions [0, positions)."""
        self._wanted = (max(self._wanted[0], slots), max(self._wanted[1], positions))

    def _fit(self, like: Tensor) -> None:
        """Allocate or grow the buffers to what `reserve` asked (like: a layer's new keys [n, h, q, d])."""
        slots, positions = self._wanted
        if self.keys is not None and self.keys.shape[1] >= slots and self.keys.shape[3] >= positions:
            return
        have_slots, have_positions = (0, 0) if self.keys is None else (self.keys.shape[1], self.keys.shape[3])
        slots = max(slots, 2 * have_slots)
        positions = max(have_positions, -(-positions // CAPACITY_STEP) * CAPACITY_STEP)
        shape = (self.layers, slots, like.shape[1], positions, like.shape[3])
        keys, values = like.new_zeros(shape), like.new_zeros(shape)
        if self.keys is not None and self.values is not None:
            keys[:, :have_slots, :, :have_positions] = self.keys
            values[:, :have_slots, :, :have_positions] = self.values
        self.keys, self.values = keys, values

    @torch.inference_mode()
    def write(self, layer: int, slots: Tensor, columns: Tensor, keys: Tensor, values: Tensor) -> None:
        """New keys/values [n, h, q, d] of rows in `slots` [n] at `columns` [n, q] of each slot."""
        self._fit(keys)
        assert self.keys is not None and self.values is not None  # _fit allocated them
        self.keys[layer][slots[:, None], :, columns] = keys.transpose(1, 2)
        self.values[layer][slots[:, None], :, columns] = values.transpose(1, 2)

    @torch.inference_mode()
    def write_block(self, layer: int, first: int, start: int, keys: Tensor, values: Tensor) -> None:
        """`write` of rows in consecutive slots from `first`, all at positions start..start + q: two
        slice copies, a few times cheaper than the indexed write (a batch of one is always such)."""
        self._fit(keys)
        assert self.keys is not None and self.values is not None  # _fit allocated them
        rows, count = keys.shape[0], keys.shape[2]
        self.keys[layer, first : first + rows, :, start : start + count] = keys
        self.values[layer, first : first + rows, :, start : start + count] = values

    def read(self, layer: int, slots: Sequence[int], length: int) -> KV:
        """Keys/values [n, h, length, d] of `slots`: a view when they are consecutive, else a gather."""
        assert self.keys is not None and self.values is not None  # read after the pass's write
        keys, values = self.keys[layer, :, :, :length], self.values[layer, :, :, :length]
        first = slots[0]
        if list(slots) == list(range(first, first + len(slots))):
            return keys[first : first + len(slots)], values[first : first + len(slots)]
        index = torch.tensor(slots, device=keys.device)
        return keys.index_select(0, index), values.index_select(0, index)

    def stored(self, slot: int, length: int) -> list[KV]:
        """Per layer, a slot's first `length` keys/values [1, h, length, d] (views)."""
        if self.keys is None or self.values is None or length == 0:
            return []
        return [
            (self.keys[i, slot : slot + 1, :, :length], self.values[i, slot : slot + 1, :, :length])
            for i in range(self.layers)
        ]

    @torch.inference_mode()
    def put(self, slot: int, start: int, kv: Sequence[KV]) -> None:
        """Per layer keys/values [1, h, t, d] into a slot at positions [start, start + t)."""
        count = kv[0][0].shape[2]
        self.reserve(slot + 1, start + count)
        self._fit(kv[0][0])
        assert self.keys is not None and self.values is not None
        for layer, (k, v) in enumerate(kv):
            self.keys[layer, slot, :, start : start + count] = k[0]
            self.values[layer, slot, :, start : start + count] = v[0]

    @torch.inference_mode()
    def move(self, slot: int, columns: Sequence[int], start: int) -> None:
        """Copy a slot's `columns` to positions [start, start + len(columns)) in every layer at once."""
        assert self.keys is not None and self.values is not None
        index = torch.tensor(columns, device=self.keys.device)
        for buffer in (self.keys, self.values):
            buffer[:, slot, :, start : start + len(columns)] = buffer[:, slot].index_select(2, index)


class PassCache:
    """What a model sees as its cache during one pass over rows of a `KVStore`: each layer's
    `update` writes the rows' new keys/values into their slots and returns what the rows attend over
    (the `transformers` cache interface; `cache[layer]` binds a layer for `DLMTransformer`).

    Row i holds `widths[i]` new tokens, aligned on the left of the pass's `q` (`right_aligned`: on
    the right, padding first); they go to positions starts[i].. of its slot, and its padding after
    them, where nothing reads it. The rows attend over the first `length` positions of their slots,
    under the caller's mask; `contiguous` hands them a contiguous copy instead of the store's view
    (exactness mode: the very tensors a concatenated cache would give)."""

    def __init__(
        self,
        store: KVStore,
        slots: Sequence[int],
        starts: Sequence[int],
        widths: Sequence[int],
        q: int,
        right_aligned: bool = False,
        contiguous: bool = False,
    ):
        self.store = store
        self.slots = list(slots)
        consecutive = self.slots == list(range(self.slots[0], self.slots[0] + len(self.slots)))
        aligned = not right_aligned or all(w == q for w in widths)
        self.block = (self.slots[0], starts[0]) if consecutive and aligned and len(set(starts)) == 1 else None
        """(first slot, first position) when the pass's keys land in one block of the store."""
        if self.block is None:
            self.slot_index = torch.tensor(self.slots, dtype=torch.long)
            offsets = torch.arange(q)[None, :]
            if right_aligned:
                offsets = (offsets - (q - torch.tensor(list(widths), dtype=torch.long)[:, None])) % q
            self.columns = torch.tensor(list(starts), dtype=torch.long)[:, None] + offsets
        self.length = max(s + w for s, w in zip(starts, widths))
        self.contiguous = contiguous
        store.reserve(max(self.slots) + 1, max(starts) + q)

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> KV:
        if self.block is not None:
            self.store.write_block(layer_idx, *self.block, key_states, value_states)
        else:
            device = key_states.device
            if self.columns.device != device:
                self.slot_index, self.columns = self.slot_index.to(device), self.columns.to(device)
            self.store.write(layer_idx, self.slot_index, self.columns, key_states, value_states)
        keys, values = self.store.read(layer_idx, self.slots, self.length)
        if self.contiguous:
            return keys.clone(memory_format=torch.contiguous_format), values.clone(
                memory_format=torch.contiguous_format
            )
        return keys, values

    def __getitem__(self, layer: int) -> LayerCache:
        return LayerCache(self, layer)


class LayerCache:
    """One layer of a `PassCache`: `update(keys, values)` -> what the layer's rows attend over."""

    def __init__(self, cache: PassCache, layer: int):
        self.cache, self.layer = cache, layer

    def update(self, keys: Tensor, values: Tensor) -> KV:
        return self.cache.update(keys, values, self.layer)

"""Several generations in one target pass: their rows padded to a common shape, each row masked so
that it sees exactly what its own generation's pass would show it.

Diffusion targets: `harness.targets.target.forward_sessions` gathers each generation's rows
(`TargetSession.full_tokens`, `causal_inputs`) and hands its slice of the output back; the padding is
the pure tensor code here. Autoregressive targets: `forward_trees` (`ARTarget.forward_many`) pads the
draft-tree passes of several `ARSession`s (`pad_tree_rows`) over the target's key/value store
(`harness.targets.kv_store`), where every session keeps its committed keys in a slot of its own.

- Full attention (LLaDA, Dream): every row is prompt + answer canvas, whose length differs by
  prompt. Rows are padded on the right; a key is valid for every query of its row iff it is not
  padding, and positions are 0.. for every row, as in the row's own pass.
- Block-causal (SDAR, LLaDA2, converted): every generation has C_i stored keys/values in its slot
  of the target's store (`harness.targets.kv_store`) and one row of T_i new tokens (the pending
  tokens, then its states one after another), padded on the right to the longest; the pass writes
  row i's new keys after its stored ones and row i attends, in its own slot, to its C_i stored keys
  and, among its new keys, to what its own attention pattern allows; positions are per row. A
  padded query reads one valid key (no row of the softmax is all masked) and its output is discarded.

Padding changes the shapes the kernels run on, so in float32 a row's logits may differ in the last
bits from its pass alone; exactness mode (`DLMTarget.exact`) never pads: it evaluates every row of
every generation alone (`forward_sessions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor


class KVLayer(Protocol):
    """One attention layer of a filled `DynamicCache`: its keys and values [batch, heads, positions, dim]."""

    keys: Tensor
    values: Tensor


def kv_layers(cache: Any) -> list[KVLayer]:
    """A `DynamicCache`'s layers as the key/value layers they are here. transformers types them as any
    cache layer (linear-attention and not-yet-filled ones included), but an AR target's cache holds
    full-attention layers only (sliding-window models are refused when loaded), filled by the first
    forward before any of these is read."""
    return cache.layers


def pad_full(rows: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Full-attention rows [n_i, L_i] of several generations -> tokens [N, L] and attend [N, 1, 1, L]."""
    length = max(r.shape[1] for r in rows)
    total = sum(r.shape[0] for r in rows)
    device = rows[0].device
    tokens = torch.full((total, length), pad_id, dtype=torch.long, device=device)
    valid = torch.zeros((total, length), dtype=torch.bool, device=device)
    start = 0
    for r in rows:
        tokens[start : start + r.shape[0], : r.shape[1]] = r
        valid[start : start + r.shape[0], : r.shape[1]] = True
        start += r.shape[0]
    return tokens, valid[:, None, None, :]


def pad_block_causal(
    inputs: list[tuple[Tensor, Tensor, Tensor, Tensor | None]], cached: list[int], pad_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Block-causal passes of several generations, each one row (`TargetSession.causal_inputs`:
    tokens [1, T_i], positions [T_i], attend [T_i, C_i + T_i] over its C_i stored keys then its new
    ones, adapted [1, T_i] or None) -> tokens [N, T], positions [N, T], attend [N, 1, T, L] over the
    first L positions of each generation's slot of the store (its new keys follow its stored ones
    there: `harness.targets.kv_store.PassCache`) and adapted [N, T] (None when no generation has
    one). Rows are padded on the right; a padded query reads its row's first new key."""
    new = max(t.shape[1] for t, _, _, _ in inputs)
    length = max(c + t.shape[1] for c, (t, _, _, _) in zip(cached, inputs))
    count, device = len(inputs), inputs[0][0].device
    tokens = torch.full((count, new), pad_id, dtype=torch.long, device=device)
    positions = torch.zeros((count, new), dtype=torch.long, device=device)
    attend = torch.zeros((count, 1, new, length), dtype=torch.bool, device=device)
    with_adapter = any(a is not None for _, _, _, a in inputs)
    adapted = torch.zeros((count, new), dtype=torch.bool, device=device) if with_adapter else None
    for i, ((row_tokens, row_positions, row_attend, row_adapted), stored) in enumerate(zip(inputs, cached)):
        t = row_tokens.shape[1]
        tokens[i, :t] = row_tokens[0]
        positions[i, :t] = row_positions
        positions[i, t:] = row_positions[-1] + 1 + torch.arange(new - t, device=device)
        attend[i, 0, :t, : stored + t] = row_attend
        attend[i, 0, t:, stored] = True  # a padded query reads the row's first new key; its output is dropped
        if row_adapted is not None and adapted is not None:  # adapted exists when any generation has rows
            adapted[i, :t] = row_adapted[0]
    return tokens, positions, attend, adapted


def pad_tree_rows(
    inputs: list[tuple[Tensor, Tensor, Tensor]], cached: list[int], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Autoregressive tree passes of several generations, each (tokens [Q_i]: the pending tokens then
    the draft nodes, positions [Q_i], attend [Q_i, C_i + Q_i] over its C_i committed keys and its
    new ones) -> tokens [N, Q], positions [N, Q] and attend [N, 1, Q, L] over the first L positions of
    each generation's slot (`harness.targets.kv_store.PassCache`: a row's new keys follow its
    committed ones there). New tokens are aligned on the right (padding first), so every generation's
    scored rows are among the last ones; a padded query reads one valid key, its output dropped."""
    new = max(t.numel() for t, _, _ in inputs)
    length = max(c + t.numel() for c, (t, _, _) in zip(cached, inputs))
    count, device = len(inputs), inputs[0][0].device
    tokens = torch.full((count, new), pad_id, dtype=torch.long, device=device)
    positions = torch.zeros((count, new), dtype=torch.long, device=device)
    attend = torch.zeros((count, 1, new, length), dtype=torch.bool, device=device)
    for i, ((row_tokens, row_positions, row_attend), stored) in enumerate(zip(inputs, cached)):
        pad = new - row_tokens.numel()
        tokens[i, pad:] = row_tokens
        positions[i, pad:] = row_positions
        attend[i, 0, pad:, : stored + row_tokens.numel()] = row_attend
        attend[i, 0, :pad, 0] = True
    return tokens, positions, attend


def forward_trees(target: Any, passes: Sequence[tuple[Any, Tensor, Sequence[int]]]) -> list[Tensor]:
    """One pass of an `ARTarget` over the draft trees of several generations (`ARSession`, node tokens,
    parents), each counted as its own session's pass. In exactness mode (`rowwise`) each generation's
    pass is its own, rows one by one; otherwise the passes that prefill a prompt and the others go
    through the model in two padded calls (one when there is one pass) over the target's key/value
    store, the rows in slot order, so that consecutive slots are read as a view."""
    from harness.targets.kv_store import PassCache

    tokens = [session.admit(t, parents) for session, t, parents in passes]
    out: list[Tensor | None] = [None] * len(passes)
    with torch.inference_mode():
        if target.rowwise:
            return [s._rowwise(t, p) for (s, _, p), t in zip(passes, tokens)]
        for prefill in (True, False):
            members = [i for i, (s, _, _) in enumerate(passes) if (s.pending.numel() > 1) == prefill]
            if not members:
                continue
            members.sort(key=lambda i: passes[i][0].slot)
            sessions = [passes[i][0] for i in members]
            inputs = [s.tree_inputs(tokens[i], passes[i][2]) for s, i in zip(sessions, members)]
            cached = [s.cached for s in sessions]
            ids, positions, allowed = pad_tree_rows(inputs, cached, target.eos_id)
            mask = torch.zeros(allowed.shape, dtype=target.dtype, device=ids.device)
            mask = mask.masked_fill(~allowed, torch.finfo(target.dtype).min)
            widths = [t.numel() for t, _, _ in inputs]
            cache = PassCache(
                target.store, [s.slot for s in sessions], cached, widths, ids.shape[1], right_aligned=True
            )
            scored = [1 + len(passes[i][2]) for i in members]
            logits = target.model(
                input_ids=ids,
                position_ids=positions,
                attention_mask=mask,
                cache=cache,
                use_cache=True,
                logits_to_keep=max(scored),
            ).logits
            for row, (i, rows) in enumerate(zip(members, scored)):
                out[i] = logits[row, logits.shape[1] - rows :]
    return out  # type: ignore[return-value]

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
- Block-causal (SDAR, LLaDA2, converted): every generation has a stored prefix of C_i keys/values
  and one row of T_i new tokens (the pending tokens, then its states one after another). The stored
  prefixes are padded to the longest, the new tokens likewise; row i attends to its own C_i stored
  keys and, among the new keys, to what its own attention pattern allows; positions are per row. A
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

KV = tuple[Tensor, Tensor]


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
    inputs: list[tuple[Tensor, Tensor, Tensor, Tensor | None]], caches: list[list[KV] | None], pad_id: int
) -> tuple[Tensor, Tensor, Tensor, list[KV] | None, Tensor | None]:
    """Block-causal passes of several generations, each one row (`TargetSession.causal_inputs`:
    tokens [1, T_i], positions [T_i], attend [T_i, C_i + T_i], adapted [1, T_i] or None) with its
    stored prefix (per layer [1, h, C_i, d], or None) -> tokens [N, T], positions [N, T], attend
    [N, 1, T, C + T], past (per layer [N, h, C, d], or None when no generation has a prefix) and
    adapted [N, T] (None when no generation has one); the code takes n_i rows per generation alike."""
    lengths = [c[0][0].shape[2] if c else 0 for c in caches]
    stored, new = max(lengths), max(t.shape[1] for t, _, _, _ in inputs)
    total = sum(t.shape[0] for t, _, _, _ in inputs)
    device = inputs[0][0].device
    tokens = torch.full((total, new), pad_id, dtype=torch.long, device=device)
    positions = torch.zeros((total, new), dtype=torch.long, device=device)
    attend = torch.zeros((total, 1, new, stored + new), dtype=torch.bool, device=device)
    with_adapter = any(a is not None for _, _, _, a in inputs)
    adapted = torch.zeros((total, new), dtype=torch.bool, device=device) if with_adapter else None
    start = 0
    for (rows_tokens, rows_positions, rows_attend, rows_adapted), cached in zip(inputs, lengths):
        n, t = rows_tokens.shape
        rows = slice(start, start + n)
        tokens[rows, :t] = rows_tokens
        positions[rows, :t] = rows_positions
        positions[rows, t:] = rows_positions[-1] + 1 + torch.arange(new - t, device=device)
        attend[rows, 0, :t, :cached] = rows_attend[:, :cached]
        attend[rows, 0, :t, stored : stored + t] = rows_attend[:, cached:]
        attend[rows, 0, t:, stored] = True  # a padded query reads the row's first new key; its output is dropped
        if rows_adapted is not None and adapted is not None:  # adapted exists when any generation has rows
            adapted[rows, :t] = rows_adapted
        start += n
    past = None
    if stored:
        reference = next(c for c in caches if c)
        past = []
        for layer, (k0, v0) in enumerate(reference):
            k = k0.new_zeros((total, k0.shape[1], stored, k0.shape[3]))
            v = v0.new_zeros((total, v0.shape[1], stored, v0.shape[3]))
            start = 0
            for (rows_tokens, _, _, _), cache, cached in zip(inputs, caches, lengths):
                n = rows_tokens.shape[0]
                if cached and cache is not None:  # a stored prefix
                    k[start : start + n, :, :cached] = cache[layer][0]
                    v[start : start + n, :, :cached] = cache[layer][1]
                start += n
            past.append((k, v))
    return tokens, positions, attend, past, adapted


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
            cache = PassCache(target.store, [s.slot for s in sessions], cached, widths, ids.shape[1])
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

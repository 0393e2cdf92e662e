"""The geometry of a draft tree verified over a KV cache in one forward: each node's depth, its
ancestors, and who may attend to whom (the cache, the pending tokens causally, a node's ancestors and
itself). Rows are numbered as the verifier numbers them: 0 is the root, i + 1 node i, parents first."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node (the root is depth 0, its children 1)."""
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent == 0 else depths[parent - 1] + 1)
    return depths


def ancestors(parents: Sequence[int], node: int) -> list[int]:
    """The nodes above `node`, root side first (node indices, not rows)."""
    chain, parent = [], parents[node]
    while parent:
        chain.append(parent - 1)
        parent = parents[parent - 1]
    return chain[::-1]


def tree_mask(pending: int, parents: Sequence[int], cached: int) -> Tensor:
    """[pending + N, cached + pending + N] bool: who may attend to whom. Everyone sees the cache;
    pending tokens are causal among themselves; a node sees every pending token, its ancestors and itself."""
    n = len(parents)
    allowed = torch.zeros(pending + n, cached + pending + n, dtype=torch.bool)
    allowed[:, : cached + pending] = True
    allowed[:pending, cached : cached + pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    for j, parent in enumerate(parents):
        row = pending + j
        if parent:
            allowed[row, cached + pending :] = allowed[pending + parent - 1, cached + pending :]
        allowed[row, cached + pending + j] = True
    return allowed

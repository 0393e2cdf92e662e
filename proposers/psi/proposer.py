"""Psi-Spec drafting (Uno): the target's own network with its gated LoRA on drafts a block of future
tokens in one forward; `harness.decoding.autoregressive.ar_decode` verifies them with the base weights.

The draft forward runs over the target's KV cache (`ARDraftRequest.session`: the committed context,
computed once, shared, never re-encoded): the pending token (the last committed one, gate off) and
n noise tokens (gate on) at the next n positions; the noise rows see the cache, the pending token
and one another (the training layout of `proposers.psi.training`). The pending row computes the base
model exactly, so its token is the exact next token (the "free" token); noise row i (position
p + i) gives the draft marginal of the token at position p + i + 1. The rows' keys/values land after
the committed ones in the session's slot of the store, which the verify pass then overwrites. Tokens
are chosen as the target chooses them: the argmax of logit/T plus the Gumbel noise of their absolute
position (`request.noise`), so at every temperature a draft is the token the target would commit if
the drafter's marginal were right (coupled mode).

- `PsiLinear` (width B): the chain [free token, B - 1 drafts]; one verify forward of B + 1 rows.
- `PsiTree` (B, K, V): the free token, then the top-K candidates at each of the next B - 1 depths
  (ranked by the same noisy scores); a prefix-closed tree of V nodes grown best-first by the sum of
  log-probabilities (log-softmax of those scores) along the path; verified by the one-forward tree
  attention with ancestor-only masks.

Each propose costs one target-network forward, counted in `forwards.target` (tokens per target
forward counts it). The first pass of a generation drafts nothing: the context is not cached yet,
and the verify forward's prefill caches it. The noise tokens are pseudo-random ids drawn from a
generator seeded by the block's first position: any id does (training noises uniformly over the
vocabulary), and fixed ids make drafts reproducible.
"""

from __future__ import annotations

import heapq

import torch
from torch import Tensor

from harness.decoding import DraftTree, Transition
from harness.decoding.ar_rejection import DraftChain
from harness.decoding.autoregressive import ARDraftRequest, DraftForwards
from harness.decoding.rules import candidate_scores
from harness.decoding.tree import DraftNode
from harness.targets.ar import ARSession
from harness.targets.kv_store import PassCache
from proposers.psi.lora import GatedLoRAModel


def noise_tokens(start: int, count: int, vocab_size: int) -> Tensor:
    """The noise rows' input ids for a block starting at absolute position `start`."""
    return torch.randint(vocab_size, (count,), generator=torch.Generator().manual_seed(start))


def draft_block(drafter: GatedLoRAModel, session: ARSession, count: int) -> Tensor:
    """[1 + count, V] logits: the pending row (next token, base model) and `count` noise rows (the
    draft marginals of the `count` tokens after it), from one forward over the session's keys and
    values: its rows are written after the committed ones, where the next pass overwrites them."""
    pending, device = session.pending, session.pending.device
    n_pending, vocab = pending.numel(), drafter.model.get_output_embeddings().weight.shape[0]
    ids = torch.cat([pending, noise_tokens(session.position, count, vocab).to(device)])
    positions = torch.arange(session.cached, session.position + count, device=device)
    allowed = torch.ones(n_pending + count, session.cached + n_pending + count, dtype=torch.bool, device=device)
    allowed[:n_pending, session.cached :] = torch.ones(
        n_pending, n_pending + count, dtype=torch.bool, device=device
    ).tril()
    dtype = drafter.model.get_output_embeddings().weight.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    gate = torch.zeros(1, n_pending + count, dtype=torch.bool, device=device)
    gate[0, n_pending:] = True
    cache = PassCache(session.target.store, [session.slot], [session.cached], [ids.numel()], ids.numel())
    with torch.inference_mode():
        out = drafter(
            gate=gate,
            input_ids=ids[None],
            position_ids=positions[None],
            attention_mask=mask[None, None],
            cache=cache,
            use_cache=True,
            logits_to_keep=1 + count,
        )
    return out.logits[0]


def scores_of(logits: Tensor, request: ARDraftRequest, first: int) -> Tensor:
    """[rows, V] float64 decision scores of rows deciding positions first, first + 1, ...: logit at
    T=0, logit/T + G(seed, position) at T>0 (the target's own rule, `target_token`)."""
    if request.temperature <= 0 or request.noise is None:
        return candidate_scores(logits, None, 0.0)
    noise = torch.stack([request.noise(first + i)[0] for i in range(logits.shape[0])])
    return candidate_scores(logits, noise, request.temperature)


class PsiLinear:
    """Linear Psi-Spec: the chain [free token, B - 1 drafts] (B = `width`, else the pass's budget)."""

    def __init__(self, drafter: GatedLoRAModel, width: int | None = None):
        self.drafter = drafter
        self.width = width
        self.forwards = DraftForwards()

    def _logits(self, request: ARDraftRequest) -> tuple[Tensor, int] | None:
        width = min(self.width or request.budget, request.budget)
        session = request.session
        if session is None:
            raise ValueError("Psi-Spec drafts over the target's session; ar_decode passes it")
        if width < 1 or session.cached == 0:
            return None
        self.forwards.target += 1
        return draft_block(self.drafter, session, width - 1), session.position

    def propose(self, request: ARDraftRequest) -> DraftTree:
        drafted = self._logits(request)
        if drafted is None:
            return DraftTree()
        logits, position = drafted
        tokens = scores_of(logits, request, position).argmax(-1).tolist()
        return DraftTree.chain([Transition((i,), (t,)) for i, t in enumerate(tokens)])

    def propose_chain(self, request: ARDraftRequest) -> DraftChain:
        """Rejection mode: each token drawn from its row's softmax(logit/T) with `request.noise`
        (the draft stream), q = that softmax; the free token's q is the base model's p."""
        drafted = self._logits(request)
        if drafted is None:
            return DraftChain([], torch.zeros(0, 1, dtype=torch.float64))
        logits, position = drafted
        tokens = scores_of(logits, request, position).argmax(-1).tolist()
        temperature = request.temperature if request.temperature > 0 else 1.0
        return DraftChain(tokens, (logits.double() / temperature).softmax(-1).cpu())


class PsiTree(PsiLinear):
    """Tree Psi-Spec: `depth` = B (free token + B - 1 draft depths), `top_k` = K candidates per depth,
    `nodes` = V (else the pass's budget), grown best-first."""

    def __init__(self, drafter: GatedLoRAModel, depth: int, top_k: int, nodes: int | None = None):
        super().__init__(drafter, depth)
        self.top_k, self.nodes = top_k, nodes

    def propose(self, request: ARDraftRequest) -> DraftTree:
        budget = min(self.nodes or request.budget, request.budget)
        drafted = self._logits(request)
        if drafted is None or budget < 1:
            return DraftTree()
        logits, position = drafted
        scores = scores_of(logits, request, position)
        free = int(scores[0].argmax())
        top = scores[1:].log_softmax(-1).topk(min(self.top_k, scores.shape[-1]), dim=-1)
        values, candidates = top.values.tolist(), top.indices.tolist()
        nodes = [DraftNode(0, Transition((0,), (free,)))]
        # heap of (-log-probability, tie order, parent node index + 1, depth of the child, rank)
        heap: list[tuple[float, int, int, int, int]] = []
        order = 0

        def push_children(parent: int, score: float, depth: int) -> None:
            nonlocal order
            if depth - 1 < len(values):
                for rank in range(len(values[depth - 1])):
                    heapq.heappush(heap, (-(score + values[depth - 1][rank]), order, parent, depth, rank))
                    order += 1

        push_children(1, 0.0, 1)
        while heap and len(nodes) < budget:
            negative, _, parent, depth, rank = heapq.heappop(heap)
            nodes.append(DraftNode(parent, Transition((depth,), (candidates[depth - 1][rank],))))
            push_children(len(nodes), -negative, depth + 1)
        return DraftTree(tuple(nodes))

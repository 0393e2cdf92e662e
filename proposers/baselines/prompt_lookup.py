"""Prompt lookup (n-gram) drafting: the training-free baseline for autoregressive targets.

As `transformers` offers it (`PromptLookupCandidateGenerator`, `prompt_lookup_num_tokens`): match the
last n tokens of the context (prompt and generated text), n from `max_ngram` down to 1, against every
earlier window, left to right; at the first match that has a continuation, draft the tokens that
followed it, as a chain of up to the budget. No match: no draft (the pass is a plain pass). Tokens
after an end-of-sequence token are dropped by the verifier's tree preparation, so the proposer need
not know the target's EOS. It reads only the token context: no target logits, no noise, so it drafts
the same chain at every temperature.
"""

from __future__ import annotations

from harness.decoding import DraftTree, Transition
from harness.decoding.autoregressive import ARDraftRequest

MAX_NGRAM = 3


class PromptLookupProposer:
    def __init__(self, max_ngram: int = MAX_NGRAM):
        if max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {max_ngram}")
        self.max_ngram = max_ngram

    def propose(self, request: ARDraftRequest) -> DraftTree:
        context = request.context
        length = context.numel()
        if request.budget <= 0:
            return DraftTree()
        for n in range(min(self.max_ngram, length - 1), 0, -1):
            windows = context[: length - 1].unfold(0, n, 1)  # a window ending at the last token has no continuation
            starts = (windows == context[-n:]).all(dim=1).nonzero().squeeze(1)
            if starts.numel():
                follow = context[int(starts[0]) + n : int(starts[0]) + n + request.budget].tolist()
                return DraftTree.chain([Transition((i,), (t,)) for i, t in enumerate(follow)])
        return DraftTree()

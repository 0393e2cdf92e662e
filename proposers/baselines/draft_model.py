"""Classic speculative decoding: a separate small autoregressive model drafts a chain (the baseline
`draft-model:NAME`; Leviathan et al. 2023, Chen et al. 2023).

The draft model must share the target's tokenizer and vocabulary (its tokens are the target's).
It keeps its own KV cache across the passes of one generation: each pass crops it to the longest
prefix it shares with the committed context, feeds the rest, then drafts one token per forward.

- Coupled mode (`propose`): the draft token at absolute position t is the draft model's
  `argmax(logit / T + G(seed, t))` with the target's own noise (`ARDraftRequest.noise`), argmax at
  T=0, so wherever the two models agree the target accepts it; the output is plain decoding's,
  token for token.
- Rejection mode (`propose_chain`): the same rule with the draft stream's noise is a Gumbel-max
  sample from q = softmax(logit / T) (one-hot on the argmax at T=0), returned with q for
  `harness.decoding.ar_rejection`.

Its forwards are counted as `DraftForwards.model` (a separate network, not the target's).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from harness.decoding import DraftTree, Transition
from harness.decoding.ar_rejection import DraftChain, target_distribution
from harness.decoding.autoregressive import ARDraftRequest, DraftForwards, target_token
from harness.errors import UserError
from harness.targets.ar import (
    SMOLLM2,
    TINY_AR,
    ARTarget,
    check_ar_name,
    folder_of,
    gguf_location,
    is_ar_name,
    kv_layers,
    load_ar_target,
    smollm2_file,
)
from harness.targets.tiny import byte_tokenizer


class DraftModelProposer:
    def __init__(self, draft: ARTarget):
        from transformers import DynamicCache

        self.draft = draft
        self.cache = DynamicCache()
        self.cached: list[int] = []
        """The tokens whose keys/values the cache holds, in order."""
        self.forwards = DraftForwards()

    def propose(self, request: ARDraftRequest) -> DraftTree:
        tokens, _ = self._draft(request)
        return DraftTree.chain([Transition((i,), (t,)) for i, t in enumerate(tokens)])

    def propose_chain(self, request: ARDraftRequest) -> DraftChain:
        tokens, logits = self._draft(request)
        q = (
            torch.stack([target_distribution(row, request.temperature) for row in logits]).cpu()
            if logits
            else torch.zeros(0, self.draft.vocab_size, dtype=torch.float64)
        )
        return DraftChain(tokens, q)

    def _draft(self, request: ARDraftRequest) -> tuple[list[int], list[Tensor]]:
        """Up to `request.budget` tokens, one draft forward each, and the logits each was chosen from;
        the chain stops after the draft model's end-of-sequence token."""
        context = request.context.tolist()
        tokens: list[int] = []
        rows: list[Tensor] = []
        if request.budget <= 0:
            return tokens, rows
        self._rewind(context)
        feed = context[len(self.cached) :]
        for depth in range(request.budget):
            row = self._forward(feed)
            position = len(context) + depth
            noise = request.noise(position)[0] if request.noise is not None and request.temperature > 0 else None
            token = target_token(row, noise, request.temperature, False)[0]
            tokens.append(token)
            rows.append(row)
            if token == self.draft.eos_id:
                break
            feed = [token]
        return tokens, rows

    def _rewind(self, context: list[int]) -> None:
        """Crop the cache to the longest prefix it shares with `context`, keeping at least the last
        context token to feed (its row gives the first draft)."""
        keep = 0
        for a, b in zip(self.cached, context[:-1]):
            if a != b:
                break
            keep += 1
        for layer in kv_layers(self.cache):
            layer.keys = layer.keys[..., :keep, :]
            layer.values = layer.values[..., :keep, :]
        self.cached = self.cached[:keep]

    def _forward(self, feed: list[int]) -> Tensor:
        """The draft model's logits [V] after `feed`, appended to its cache."""
        device = self.draft.device
        ids = torch.tensor(feed, dtype=torch.long, device=device)
        positions = torch.arange(len(self.cached), len(self.cached) + len(feed), device=device)
        with torch.inference_mode():
            out = self.draft.model(
                input_ids=ids[None], position_ids=positions[None], cache=self.cache, use_cache=True, logits_to_keep=1
            )
        self.cached += feed
        self.forwards.model += 1
        return out.logits[0, -1]


def build_draft_model(name: str, target: ARTarget) -> DraftModelProposer:
    """The proposer of one generation over the draft model, loaded once per process beside the target."""
    draft = draft_target(name, str(target.device), target.dtype)
    check_same_vocabulary(draft, target, name)
    return DraftModelProposer(draft)


@functools.cache
def draft_target(name: str, device: str, dtype: torch.dtype) -> ARTarget:
    return load_ar_target(name, torch.device(device), dtype)


def check_draft_name(name: str | None) -> None:
    """What loading `name` as a draft model would refuse, without loading weights."""
    if name is None:
        raise UserError(
            "proposer draft-model needs a model: draft-model:NAME (smollm2, tiny-random-ar[:seed] or "
            "a causal-LM folder sharing the target's tokenizer)"
        )
    if not is_ar_name(name):
        raise UserError(
            f"draft-model:{name}: not an autoregressive model; give smollm2, tiny-random-ar[:seed] or "
            "a causal-LM folder sharing the target's tokenizer"
        )
    check_ar_name(name)


def check_draft_fits(name: str, model: str) -> None:
    """Before a run starts: the draft model's tokenizer is the target's (tokenizers only, no weights)."""
    if tokenizer_vocabulary(name) != tokenizer_vocabulary(model):
        raise UserError(
            f"draft-model:{name} has another tokenizer than model {model!r}: a draft model must share "
            "the target's tokenizer and vocabulary"
        )


def check_same_vocabulary(draft: ARTarget, target: ARTarget, name: str) -> None:
    """Once loaded: the same logit width (a checkpoint may pad its vocabulary beyond the tokenizer's)."""
    if draft.vocab_size != target.vocab_size:
        raise UserError(
            f"draft-model:{name} scores {draft.vocab_size} tokens, model {target.name!r} "
            f"{target.vocab_size}: a draft model must share the target's vocabulary"
        )


@functools.cache
def tokenizer_vocabulary(name: str) -> tuple[tuple[str, int], ...]:
    """The token -> id map of an AR model's tokenizer, loaded alone (offline)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerBase

    tokenizer: PreTrainedTokenizerBase
    if name.startswith(TINY_AR):
        tokenizer = byte_tokenizer()
    else:
        path = smollm2_file() if name == SMOLLM2 else folder_of(name)
        gguf = path.suffix == ".gguf" or not (path / "config.json").is_file()
        folder, file = gguf_location(path) if gguf else (path, None)
        try:
            tokenizer = AutoTokenizer.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=False, **({"gguf_file": file} if file else {})
            )
        except (OSError, ValueError, KeyError) as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(f"{folder}: cannot load its tokenizer ({first})") from None
    return tuple(sorted(tokenizer.get_vocab().items()))

"""Training-free baselines, and the upper bound every learned proposer is measured against.

- `confidence`: the confidence order of FreeDave / SSD-style self-speculation: the rule simulated on
  the target's stale view (`confidence`, and `confidence-branch` with runner-up siblings);
- `oracle`: the true plain trajectory replayed (`oracle`, `oracle-order`): the upper bound for a
  budget, for diffusion and autoregressive targets;
- `prompt_lookup`: prompt lookup decoding for autoregressive targets (n-gram matches in the context);
- `draft_model`: classic draft-model speculative decoding (`draft-model:NAME`, a smaller
  autoregressive model sharing the target's tokenizer);
- `family`: their registry entries (`FAMILIES`).
"""

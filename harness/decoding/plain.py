"""Plain decoding: the reference every speculative arm must reproduce token for token.

Semi-autoregressive: the answer is decoded block by block; each target pass evaluates one state and
commits one transition of the rule, with the noise of the global step. It records the trajectory and,
per step, how close the target's decision was, so a divergence can be classified later.

It also measures the *stale-token hit rate* (SPOT's observation, >90% on real models): the fraction
of committed tokens that equal the previous pass's greedy token at their position (the mask token
excluded, as in the rules). That is the premise of every draft proposer: the stale view already
knows the tokens, so only the order is left to predict. The first pass of a block has a previous
pass only on full-attention targets (its `following` logits); elsewhere those commits are not counted.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from harness.decoding.generation import DecodeConfig, Generation, synchronize
from harness.decoding.metrics import Metrics
from harness.decoding.noise import gumbel
from harness.decoding.rules import StepRecord, Transition, greedy_tokens
from harness.targets.target import DLMTarget


def plain_decode(target: DLMTarget, prompt_ids: list[int] | Tensor, config: DecodeConfig,
                 keep_logits: bool = False) -> Generation:
    """`keep_logits` also returns every pass's logits, which is what `replay` needs."""
    rule, temperature, size = config.rule, config.temperature, config.block_length
    session = target.start(prompt_ids, config.gen_length, size)
    metrics = Metrics()
    steps: list[Transition] = []
    records: list[StepRecord] = []
    pass_logits: list[Tensor] = []
    following_logits: list[Tensor | None] = []
    stale_tokens: Tensor | None = None
    start = time.perf_counter()
    for _ in range(session.num_blocks):
        state = torch.full((size,), target.mask_id, dtype=torch.long)
        left = size
        while left:
            before = time.perf_counter()
            output = session.forward(state[None])
            logits = output.current[0]
            synchronize(logits)
            metrics.target_s += time.perf_counter() - before
            noise = gumbel(config.seed, len(steps), size, target.vocab_size) if temperature > 0 else None
            transition, record = rule.explain(logits, state, noise, temperature)
            if stale_tokens is not None:
                metrics.stale_commits += len(transition.positions)
                metrics.stale_hits += sum(
                    int(stale_tokens[p]) == t for p, t in zip(transition.positions, transition.tokens)
                )
            stale_tokens = greedy_tokens(logits, target.mask_id)
            state = transition.apply(state)
            left -= len(transition.positions)
            steps.append(transition)
            records.append(record)
            if keep_logits:
                pass_logits.append(logits.cpu())
        following = output.following
        if keep_logits:
            following_logits.append(None if following is None else following[0].cpu())
        stale_tokens = None if following is None else greedy_tokens(following[0], target.mask_id)
        session.finish_block(state)
        if bool((state == target.eos_id).any()):
            break
    metrics.wall_s = time.perf_counter() - start
    metrics.nfe, metrics.rows, metrics.commits = session.nfe, session.rows, len(steps)
    kept = (pass_logits, following_logits) if keep_logits else (None, None)
    return Generation(session.answer(), steps, [1] * len(steps), records, metrics, target.eos_id, *kept)

"""The speculative loop (DESIGN.md section 3), identical for every proposer.

Each pass: the proposer drafts a tree from the stale view; the root and every node are evaluated in
ONE target pass; the verifier walks from the root, computing the target's own transition with the
rule and the noise of step s + depth, and moves to the child whose transition equals it (state
equality); it commits the walked transitions plus the final one (the bonus). The proposer only
chooses which states get evaluated, never what is committed, so the output equals plain decoding's
whenever a state's logits do not depend on the batch it was evaluated in (exactness mode).
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from harness.decoding.generation import DecodeConfig, Generation, synchronize
from harness.decoding.metrics import Metrics
from harness.decoding.noise import NoiseSource
from harness.decoding.rules import Transition
from harness.decoding.tree import DraftRequest, Proposer, prepare
from harness.targets.target import DLMTarget


def speculative_decode(
    target: DLMTarget, prompt_ids: list[int] | Tensor, proposer: Proposer, config: DecodeConfig, budget: int
) -> Generation:
    if budget < 0:
        raise ValueError(f"the draft budget must be >= 0, got {budget}")
    rule, temperature, size, mask_id = config.rule, config.temperature, config.block_length, target.mask_id
    session = target.start(prompt_ids, config.gen_length, size)
    noise = NoiseSource(config.seed, size, target.vocab_size) if temperature > 0 else None
    metrics = Metrics(accepted_per_depth=[0] * budget)
    steps: list[Transition] = []
    pass_commits: list[int] = []
    state = torch.full((size,), mask_id, dtype=torch.long)
    stale: Tensor | None = None
    history: list[int] = []  # this block's committed positions, oldest first
    start = time.perf_counter()
    while True:
        root_step = len(steps)
        if noise:
            noise.forget_before(root_step)
        before = time.perf_counter()
        draft = proposer.propose(DraftRequest(stale, state, root_step, noise, rule, temperature, budget,
                                              tuple(history)))
        metrics.proposer_s += time.perf_counter() - before
        tree = prepare(draft, state, mask_id, budget)
        before = time.perf_counter()
        logits = session.forward(tree.states)
        synchronize(logits.current)
        metrics.target_s += time.perf_counter() - before
        # Walk: at each row the target's own transition; move to the child that drafted exactly it.
        row, depth = 0, 0
        while True:
            sample = noise(root_step + depth) if noise else None
            transition = rule(logits.current[row], tree.states[row], sample, temperature)
            steps.append(transition)
            child = tree.child(row, transition)
            if child is None:
                break  # `transition` is the bonus commit
            metrics.accepted_per_depth[depth] += 1
            row, depth = child, depth + 1
        metrics.draft_nodes += tree.states.shape[0] - 1
        pass_commits.append(depth + 1)
        history.extend(p for t in steps[root_step:] for p in t.positions)
        state = transition.apply(tree.states[row])
        if bool((state != mask_id).all()):
            session.finish_block(state)
            if bool((state == target.eos_id).any()) or session.block_index == session.num_blocks:
                break
            stale = None if logits.following is None else logits.following[row]
            state = torch.full((size,), mask_id, dtype=torch.long)
            history = []
        else:
            stale = logits.current[row]
    metrics.wall_s = time.perf_counter() - start
    metrics.nfe, metrics.rows, metrics.commits = session.nfe, session.rows, len(steps)
    return Generation(session.answer(), steps, pass_commits, None, metrics, target.eos_id)

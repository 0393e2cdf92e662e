"""The block loop (DESIGN.md section 3): one loop for every arm, plain decoding included.

Each pass: the proposer drafts a tree from the stale view; the root and every node are evaluated in
ONE target pass; the verifier walks from the root, computing the target's own transition with the
rule and the noise of step s + depth, and moves to the child whose transition equals it (state
equality); it commits the walked transitions plus the final one (the bonus). The proposer only
chooses which states get evaluated, never what is committed, so the output equals plain decoding's
whenever a state's logits do not depend on the batch it was evaluated in (exactness mode).

Plain decoding is this loop with budget 0 (`plain_decode`): every pass evaluates the root alone and
commits one transition. With `trace` the loop also keeps what the reference needs: per step, how
close the rule's decision was (`StepRecord`, for divergence forensics) and the stale-token hit count;
with `keep_logits`, the logits of every walked row (replay and SPOT's training data read them).

The loop is written for one generation and yields each draft, target pass and walk it needs (`speculative_generation`);
`harness.decoding.batch.decode_batch` drives one generation alone (`speculative_decode`) or many
together, one target pass per step across them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from harness.decoding.batch import Decoding, Draft, Pass, decode_batch
from harness.decoding.generation import DecodeConfig, Generation
from harness.decoding.metrics import Metrics
from harness.decoding.noise import NoiseSource, noise_device
from harness.decoding.rules import StepRecord, Transition, greedy_tokens
from harness.decoding.tree import BatchProposer, DraftRequest, DraftTree, Proposer, prepare, stop_reason
from harness.decoding.verify import Verify
from harness.targets.target import DLMTarget


def speculative_decode(
    target: DLMTarget,
    prompt_ids: list[int] | Tensor,
    proposer: Proposer,
    config: DecodeConfig,
    budget: int,
    trace: bool = False,
    keep_logits: bool = False,
) -> Generation:
    """One generation, driven alone; `decode_batch` drives many `speculative_generation`s together."""
    return decode_batch(
        target, [speculative_generation(target, prompt_ids, proposer, config, budget, trace, keep_logits)]
    )[0]


def speculative_generation(
    target: DLMTarget,
    prompt_ids: list[int] | Tensor,
    proposer: Proposer,
    config: DecodeConfig,
    budget: int,
    trace: bool = False,
    keep_logits: bool = False,
) -> Decoding:
    """The block loop of one generation: yields each draft it needs (`Draft`), each target pass
    (`Pass`) and each walk of a tree over its pass (`Verify`), receives the tree, the pass's
    `BlockLogits` and the `Walk`, returns the `Generation` (its times are filled in by `decode_batch`)."""
    if budget < 0:
        raise ValueError(f"the draft budget must be >= 0, got {budget}")
    rule, temperature, size, mask_id = config.rule, config.temperature, config.block_length, target.mask_id
    session = target.start(prompt_ids, config.gen_length, size)
    noise = NoiseSource(config.seed, size, target.vocab_size, noise_device(target.device)) if temperature > 0 else None
    metrics = Metrics(accepted_per_depth=[0] * budget)
    steps: list[Transition] = []
    pass_commits: list[int] = []
    stops: list[str] = []
    records: list[StepRecord] = []
    kept: list[Tensor] = []
    following: list[Tensor | None] = []
    state = session.first_state()
    stale: Tensor | None = None
    history: list[int] = []  # this block's committed positions, oldest first
    while True:
        root_step = len(steps)
        if noise:
            noise.forget_before(root_step)
        request = DraftRequest(stale, state, root_step, noise, rule, temperature, budget, tuple(history))
        draft = yield Draft(proposer, request)  # drafted with the batch's other generations
        tree = prepare(draft, state, mask_id, budget)
        logits = yield Pass(session, tree.states)  # one target pass over [root] + nodes
        # Walk: at each row the target's own transition; move to the child that drafted exactly it
        # (`harness.decoding.verify`: walked with the batch's other generations, depth by depth).
        walk = yield Verify(tree, logits.current, root_step, noise, rule, temperature, trace)
        steps.extend(walk.transitions)  # the drafted transitions it walked, then the bonus commit
        records.extend(walk.records)
        if keep_logits:
            kept.extend(logits.current[r].cpu() for r in walk.rows)
        row, transition, depth = walk.rows[-1], walk.transitions[-1], len(walk.rows) - 1
        for d in range(depth):
            metrics.accepted_per_depth[d] += 1
        if trace and stale is not None:
            count_stale_hits(metrics, stale, steps[root_step:], mask_id)
        metrics.draft_nodes += tree.states.shape[0] - 1
        pass_commits.append(depth + 1)
        stops.append(stop_reason(tree, row, transition))
        history.extend(p for t in steps[root_step:] for p in t.positions)
        state = transition.apply(tree.states[row])
        stale = logits.current[row]
        if bool((state != mask_id).all()):
            answer_complete = session.finish_block(state)
            stale = None if logits.following is None else logits.following[row]
            if keep_logits:
                following.append(None if stale is None else stale.cpu())
            if answer_complete:
                break
            state = torch.full((size,), mask_id, dtype=torch.long)
            history = []
    metrics.nfe, metrics.rows, metrics.commits = session.nfe, session.rows, len(steps)
    return Generation(
        session.answer(),
        steps,
        pass_commits,
        records if trace else None,
        metrics,
        target.eos_id,
        kept if keep_logits else None,
        following if keep_logits else None,
        stops,
        session.first_state(),
        answer_length(target, config),
    )


def answer_length(target: DLMTarget, config: DecodeConfig) -> int | None:
    """gen_length where the family's published generate cuts the answer there (LLaDA2), else None
    (every decoded position). A replayed target has no family: `replay` keeps the plain one's."""
    family = getattr(target, "family", None)
    return config.gen_length if family is not None and family.answer_cut_at_gen_length else None


def count_stale_hits(metrics: Metrics, stale: Tensor, committed: list[Transition], mask_id: int) -> None:
    """The stale-token hit rate (SPOT's premise, >90% on real models): of the tokens a pass commits,
    how many equal the stale view's greedy token at their position (mask excluded, as in the rules).
    Under plain decoding the stale view is the previous pass over the block; the first pass of a
    block has one only on full-attention targets (the `following` logits)."""
    positions = [p for transition in committed for p in transition.positions]
    tokens = [t for transition in committed for t in transition.tokens]
    greedy = greedy_tokens(stale[positions], mask_id).tolist()
    metrics.stale_commits += len(positions)
    metrics.stale_hits += sum(g == t for g, t in zip(greedy, tokens))


class NoDraft:
    """The proposer of plain decoding: drafts nothing."""

    batch_key = None

    def propose(self, request: DraftRequest) -> DraftTree:
        return DraftTree()

    def propose_batch(self, proposers: Sequence[BatchProposer], requests: Sequence[DraftRequest]) -> list[DraftTree]:
        return [DraftTree()] * len(requests)


def plain_decode(
    target: DLMTarget, prompt_ids: list[int] | Tensor, config: DecodeConfig, keep_logits: bool = False
) -> Generation:
    """The reference every speculative arm must reproduce token for token: budget 0, traced."""
    return decode_batch(target, [plain_generation(target, prompt_ids, config, keep_logits)])[0]


def plain_generation(
    target: DLMTarget, prompt_ids: list[int] | Tensor, config: DecodeConfig, keep_logits: bool = False
) -> Decoding:
    """`plain_decode`'s loop, for `decode_batch`."""
    return speculative_generation(target, prompt_ids, NoDraft(), config, 0, trace=True, keep_logits=keep_logits)

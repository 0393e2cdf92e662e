"""Autoregressive decoding, plain and speculative: one loop, and plain decoding is budget 0.

Semantics (DESIGN.md section 2, "Autoregressive targets"; docs/autoregressive.md):

- The token at absolute position t (prompt positions included, from 0) is `argmax_v logit[v]` at T=0
  and `argmax_v(logit[v]/T + G(seed, t)[v])` at T>0, scores in float64, ties to the lowest id. The
  noise is keyed by the absolute position, so one token gets the same noise whichever pass, row or
  proposer decides it: the coupling that makes speculative decoding lossless at every temperature.
- A generation stops after the end-of-sequence token (kept in `Generation.tokens`, cut from
  `answer_ids`) or after `gen_length` new tokens.
- Each pass: the proposer drafts a tree of future tokens; the root (the last committed token, not
  yet in the KV cache) and every node are evaluated in ONE target forward with tree attention
  (`harness.targets.ar`); the walk computes the target's own token at each depth and moves to the
  child that drafted exactly it; the walked tokens plus the final one (the bonus) are committed and
  only the accepted path's keys/values stay in the cache. Every pass commits >= 1 token.

Draft trees reuse `DraftTree`: node j has a parent (0 the root, i + 1 node i) and a
`Transition((offset,), (token,))` whose offset from the next token is its depth - 1. The offset is
implied by the tree, but keeping it makes an AR node a transition like a DLM node, and the
trajectory (`Generation.steps[i] = Transition((i,), (token_i,))`) is compared by the same lossless
check. Budget 0 is plain decoding, traced for divergence forensics (`StepRecord` per token).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor

from harness.decoding.batch import Decoding, Pass, decode_batch
from harness.decoding.generation import Generation, check_numbers
from harness.decoding.metrics import Metrics
from harness.decoding.noise import NoiseSource, PositionNoise
from harness.decoding.rules import StepRecord, Transition, candidate_scores
from harness.decoding.tree import LEAF, NO_DRAFT, TOKEN, DraftTree
from harness.targets.ar import ARSession, ARTarget
from harness.validation import Count, Seed, Temperature

D = TypeVar("D")
AR_RULE = "greedy"
"""The rule column of AR rows: commit rules (top1/threshold) are DLM notions; an AR target always
commits its (noisy) argmax token, one position at a time."""


@dataclass(frozen=True)
class ARConfig:
    """What one AR generation is asked for."""

    gen_length: int = 64
    """Most new tokens."""
    temperature: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_numbers(self, {"gen_length": Count, "temperature": Temperature, "seed": Seed})


@dataclass(frozen=True)
class ARDraftRequest:
    """Everything an AR proposer may look at for one pass (never the target's logits of this pass)."""

    context: Tensor
    """[L] on the CPU: the prompt and every committed token; the draft continues it."""
    prompt_length: int
    noise: PositionNoise | None
    """Noise keyed by absolute position: the node at depth d decides position `len(context) + d - 1`."""
    temperature: float
    budget: int
    """Most draft nodes the pass will evaluate (fewer near `gen_length`); extra nodes are dropped."""
    session: ARSession | None = None
    """The target's session, for a drafter that shares the target's weights (Psi-Spec): it may run a
    forward over the session's KV cache (the committed context, computed once) and must leave the
    cache as it found it."""


class ARProposer(Protocol):
    def propose(self, request: ARDraftRequest) -> DraftTree: ...


@dataclass
class DraftForwards:
    """Network forwards a proposer has run to draft, counted by the proposer itself. A draft forward
    of the target's own network (Psi-Spec: the gated LoRA on, the base weights shared) costs what a
    verify forward costs, so it counts in `Metrics.target_forwards` (tokens per target forward,
    speedup_nfe); a separate draft model's forwards are a cost of their own, reported apart."""

    target: int = 0
    """Forwards of the target's network (increment once per draft forward, whatever its rows)."""
    model: int = 0
    """Forwards of a separate draft model."""


@runtime_checkable
class CountsForwards(Protocol):
    """An AR proposer that runs a network: the loops read `forwards` before and after a generation."""

    forwards: DraftForwards


@dataclass
class PreparedARTree:
    tokens: Tensor
    """[N] the kept nodes' tokens, in row order (row j + 1 is node j)."""
    parents: list[int]
    """Row of each kept node's parent (0 the root)."""
    children: dict[tuple[int, int], int]
    """(row, token) -> the child's row."""


def prepare_ar(tree: DraftTree, budget: int, max_depth: int, eos_id: int) -> PreparedARTree:
    """Validate a proposer's tree and lay out its rows. Kept: the first `budget` nodes, no deeper
    than `max_depth` (the tokens left before `gen_length`, less the bonus), not repeating a sibling
    and not below an end-of-sequence node (nothing follows it); descendants of a dropped node go with
    it. A node that is structurally wrong (parent not before it, not one token, an offset other than
    its depth - 1) is a proposer bug: ValueError."""
    tokens: list[int] = []
    parents: list[int] = []
    depths = [0]
    children: dict[tuple[int, int], int] = {}
    row_of = {0: 0}
    for index, node in enumerate(tree.nodes[: max(budget, 0)], start=1):
        t = node.transition
        if not 0 <= node.parent < index or len(t.positions) != 1:
            raise ValueError(f"invalid AR draft node {index - 1}: {node}")
        parent_row = row_of.get(node.parent)
        if parent_row is None:
            continue
        depth = depths[parent_row] + 1
        if t.positions[0] != depth - 1:
            raise ValueError(f"AR draft node {index - 1} has offset {t.positions[0]}, its depth says {depth - 1}")
        key = (parent_row, t.tokens[0])
        if depth > max_depth or key in children or (parent_row and tokens[parent_row - 1] == eos_id):
            continue
        row_of[index] = children[key] = len(tokens) + 1
        tokens.append(t.tokens[0])
        parents.append(parent_row)
        depths.append(depth)
    return PreparedARTree(torch.tensor(tokens, dtype=torch.long), parents, children)


def target_token(
    logits: Tensor, noise: Tensor | None, temperature: float, record: bool
) -> tuple[int, StepRecord | None]:
    """The target's token from one row's logits [V] (see the module docstring) and, with `record`,
    how close the decision was: the top-1 minus top-2 probability, and the gap between the two best
    scores in logit units (times T), the unit the lossless check's near-tie tolerance is in."""
    scores = candidate_scores(logits[None], None if noise is None else noise[None], temperature)[0]
    token = int(scores.argmax())
    if not record:
        return token, None
    top2 = scores.topk(2).values
    probs = logits.double().softmax(-1).topk(2).values
    gap = float(top2[0] - top2[1]) * (temperature if temperature > 0 else 1.0)
    return token, StepRecord(float(probs[0] - probs[1]), gap)


def ar_decode(
    target: ARTarget,
    prompt_ids: list[int] | Tensor,
    proposer: ARProposer,
    config: ARConfig,
    budget: int,
    trace: bool = False,
) -> Generation:
    """One generation, driven alone; `decode_batch` drives many `ar_generation`s together."""
    return decode_batch(target, [ar_generation(target, prompt_ids, proposer, config, budget, trace)])[0]


def ar_generation(
    target: ARTarget,
    prompt_ids: list[int] | Tensor,
    proposer: ARProposer,
    config: ARConfig,
    budget: int,
    trace: bool = False,
) -> Decoding:
    """The AR loop (module docstring), yielding each target pass (`Pass` with the tree's parents).
    `trace` keeps a `StepRecord` per token (the reference does)."""
    temperature, eos = config.temperature, target.eos_id
    log, session = PassLog.begin(target, prompt_ids, proposer, config, budget)
    noise = NoiseSource(config.seed, 1, target.vocab_size) if temperature > 0 else None
    records: list[StepRecord] = []
    metrics, tokens = log.metrics, log.tokens
    while log.unfinished():
        position = session.position
        if noise:
            noise.forget_before(position)
        draft = log.draft(proposer.propose, session, noise, temperature)
        tree = prepare_ar(draft, budget, log.left(), eos)
        logits = yield Pass(session, tree.tokens, list(tree.parents))  # one target pass over root + nodes
        row, depth, path = 0, 0, []
        while True:
            token, record = target_token(logits[row], noise(position + depth)[0] if noise else None, temperature, trace)
            tokens.append(token)
            if record is not None:  # traced
                records.append(record)
            child = tree.children.get((row, token))
            if child is None or token == eos or len(tokens) == config.gen_length:
                break
            metrics.accepted_per_depth[depth] += 1
            row, depth = child, depth + 1
            path.append(child)
        stop = (
            NO_DRAFT
            if not tree.parents
            else TOKEN
            if child is None and any(r == row for r, _ in tree.children)
            else LEAF
        )
        log.end_pass(session, len(tree.parents), path, token, stop)
    return log.generation(session, eos, records if trace else None)


def draft_forwards(proposer: object) -> DraftForwards:
    """A copy of what a proposer has counted so far (zeros for one that runs no network)."""
    counted = proposer.forwards if isinstance(proposer, CountsForwards) else DraftForwards()
    return DraftForwards(counted.target, counted.model)


def count_draft_forwards(metrics: Metrics, proposer: object, before: DraftForwards) -> None:
    """The draft forwards a proposer ran during one generation, into its metrics."""
    after = draft_forwards(proposer)
    metrics.draft_target_forwards = after.target - before.target
    metrics.draft_model_forwards = after.model - before.model


@dataclass
class PassLog:
    """What an AR loop records pass by pass, and the `Generation` it becomes: one definition for the
    coupled loop here and the rejection loop (`harness.decoding.ar_rejection`), so rows of both modes
    count commits, passes and draft forwards the same way (their wall and target time are timed by
    `harness.decoding.batch.decode_batch`, which drives both loops)."""

    proposer: object
    budget: int
    gen_length: int
    eos: int
    prompt: Tensor
    metrics: Metrics
    forwards_before: DraftForwards
    tokens: list[int] = field(default_factory=list)
    pass_commits: list[int] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)

    @classmethod
    def begin(
        cls, target: ARTarget, prompt_ids: list[int] | Tensor, proposer: object, config: ARConfig, budget: int
    ) -> tuple[PassLog, ARSession]:
        """A generation's start: the target's session over the prompt, and the log, whose draft-forward
        count starts here."""
        if budget < 0:
            raise ValueError(f"the draft budget must be >= 0, got {budget}")
        session = target.start(prompt_ids)
        metrics = Metrics(accepted_per_depth=[0] * budget)
        forwards_before = draft_forwards(proposer)
        log = cls(proposer, budget, config.gen_length, target.eos_id, session.pending.cpu(), metrics, forwards_before)
        return log, session

    def unfinished(self) -> bool:
        """Whether another pass runs: fewer than `gen_length` tokens, and the last one not EOS."""
        return len(self.tokens) < self.gen_length and (not self.tokens or self.tokens[-1] != self.eos)

    def left(self) -> int:
        """The most drafts this pass could commit: the tokens left, less the pass's own token."""
        return self.gen_length - len(self.tokens) - 1

    def draft(
        self,
        propose: Callable[[ARDraftRequest], D],
        session: ARSession,
        noise: PositionNoise | None,
        temperature: float,
    ) -> D:
        """The proposer's draft for this pass (timed as proposer time): the context so far, at most
        min(budget, `left`) drafts."""
        context = torch.cat([self.prompt, torch.tensor(self.tokens, dtype=torch.long)])
        before = time.perf_counter()
        draft = propose(
            ARDraftRequest(context, self.prompt.numel(), noise, temperature, min(self.budget, self.left()), session)
        )
        self.metrics.proposer_s += time.perf_counter() - before
        return draft

    def end_pass(self, session: ARSession, drafted: int, path: list[int], token: int, stop: str) -> None:
        """Record a pass that accepted the drafts on `path` and committed `token` (already in `tokens`)
        after them, and keep their keys/values unless the generation ends here."""
        self.metrics.draft_nodes += drafted
        self.pass_commits.append(len(path) + 1)
        self.stops.append(stop)
        if token != self.eos and len(self.tokens) < self.gen_length:
            session.commit(path, token)

    def generation(self, session: ARSession, eos: int, records: list[StepRecord] | None) -> Generation:
        """The finished generation: the session's forward counts and the trajectory, one token a step."""
        metrics = self.metrics  # its wall and target time are `decode_batch`'s
        metrics.nfe, metrics.rows, metrics.commits = session.nfe, session.rows, len(self.tokens)
        count_draft_forwards(metrics, self.proposer, self.forwards_before)
        steps = [Transition((i,), (t,)) for i, t in enumerate(self.tokens)]
        return Generation(
            torch.tensor(self.tokens, dtype=torch.long),
            steps,
            self.pass_commits,
            records,
            metrics,
            eos,
            stops=self.stops,
        )


class NoARDraft:
    """The proposer of plain decoding: drafts nothing."""

    def propose(self, request: ARDraftRequest) -> DraftTree:
        return DraftTree()


def ar_plain_decode(target: ARTarget, prompt_ids: list[int] | Tensor, config: ARConfig) -> Generation:
    """The reference every speculative AR arm must reproduce token for token: budget 0, traced."""
    return ar_decode(target, prompt_ids, NoARDraft(), config, 0, trace=True)


def ar_plain_generation(target: ARTarget, prompt_ids: list[int] | Tensor, config: ARConfig) -> Decoding:
    """`ar_plain_decode`'s loop, for `decode_batch`."""
    return ar_generation(target, prompt_ids, NoARDraft(), config, 0, trace=True)

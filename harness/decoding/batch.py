"""Many generations, one target pass per step across them (DESIGN.md section 3, "Batches").

A decoding loop is written for one generation, as a Python generator: where it needs a draft it
yields a `Draft` (its proposer and request) and receives the tree; where it needs the target it
yields a `Pass` (its session and the states it wants evaluated) and receives their logits; where it
verifies them it yields a `Verify` and receives the walk; when it is done it returns its
`Generation`. `decode_batch` drives up to `batch_size` such generations at once, in rounds: it
collects the draft requests of every active generation and drafts them together
(`harness.decoding.tree.propose_all`: one `propose_batch` call per kind of proposer), then the pass
each one yields, evaluates all of them in ONE call of the target's `forward_many`, hands each
generation its own rows back, and walks every generation's tree together
(`harness.decoding.verify.walk_all`: one rule call per depth). A generation that finishes leaves
and the next pending one joins (continuous batching).

Batching changes no generation's semantics: its noise is keyed by its own seed and steps, its
proposer, rule and commits are its own, and its session counts its own passes and rows; only the
logits may differ in the last bits where the target pads rows together (never in exactness mode,
`harness.targets.target.forward_sessions`).

Time. A generation's `target_s` is its share of the batched passes it took part in (each pass's time
split by rows evaluated); its `proposer_s` its share of the batched drafts (each call's time split
evenly); its engine time is its own (the driver times each resumption of its loop) plus its share of
the batched walks (split evenly); its `wall_s` is
the sum of the three: the worker time it cost. So the walls of a batch add up
to the batch's time, tokens / wall is the job's throughput, and at batch size 1 wall is the
generation's latency as before.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from harness.decoding.generation import Generation, synchronize
from harness.decoding.tree import DraftRequest, Proposer, propose_all
from harness.decoding.verify import Verify, walk_all


@dataclass(frozen=True)
class Pass:
    """What a generation asks of the target: one pass of `session` over `states` (a diffusion
    target's block states [n, B]), or for an autoregressive target over the draft tree `states`
    (node tokens [n]) with its `parents`."""

    session: Any
    states: Tensor
    parents: list[int] | None = None

    @property
    def rows(self) -> int:
        """Rows the pass evaluates: what its share of a batched pass's time is measured by."""
        return self.states.shape[0] if self.parents is None else 1 + len(self.parents)

    def alone(self) -> Any:
        """The pass as its session's own `forward`."""
        return (
            self.session.forward(self.states)
            if self.parents is None
            else self.session.forward(self.states, self.parents)
        )

    def inputs(self) -> tuple:
        return (self.session, self.states) if self.parents is None else (self.session, self.states, self.parents)


@dataclass(frozen=True)
class Draft:
    """What a generation asks of its proposer: the draft tree for `request`."""

    proposer: Proposer
    request: DraftRequest


Decoding = Generator[Pass | Draft | Verify, Any, Generation]
"""One generation's loop: yields the drafts, passes and walks it needs, receives each one's tree,
logits or walk, returns the result."""


def decode_batch(target: Any, generations: Iterable[Decoding], batch_size: int = 1) -> list[Generation]:
    """Run `generations` to completion, at most `batch_size` at a time, one target pass per round
    over every active one (`target.forward_many`: `DLMTarget`, `ARTarget`); the results in the order
    given."""
    if batch_size < 1:
        raise ValueError(f"the batch size must be >= 1, got {batch_size}")
    pending = iter(enumerate(generations))
    active: dict[int, tuple[Decoding, Any]] = {}
    clock: dict[int, list] = {}  # per generation: [own time, target share, passes, proposer share]
    done: dict[int, Generation] = {}

    def resume(index: int, loop: Decoding, value: Any) -> None:
        before = time.perf_counter()
        try:
            request = loop.send(value)
        except StopIteration as stop:
            clock[index][0] += time.perf_counter() - before
            own, share, passes, drafting = clock.pop(index)
            done[index] = stop.value
            if passes:  # a loop that never asked for a pass (an unbatched one) timed itself
                stop.value.metrics.target_s = share
                stop.value.metrics.proposer_s += drafting  # loops that draft themselves (AR) add 0
                stop.value.metrics.wall_s = own + share + drafting
            return
        clock[index][0] += time.perf_counter() - before
        clock[index][2] += isinstance(request, Pass)
        active[index] = (loop, request)

    exhausted = False
    while True:
        # Until every active generation waits for a pass: walk all the trees that were evaluated
        # (finished generations leave, pending ones join), then draft for all of them together.
        while True:
            while not exhausted and len(active) < batch_size:
                item = next(pending, None)
                if item is None:
                    exhausted = True
                    break
                clock[item[0]] = [0.0, 0.0, 0, 0.0]
                resume(item[0], item[1], None)
            if verifying := [i for i in active if isinstance(active[i][1], Verify)]:
                before = time.perf_counter()
                walks = walk_all([active[i][1] for i in verifying])
                spent = (time.perf_counter() - before) / len(verifying)
                for index, walk in zip(verifying, walks):
                    clock[index][0] += spent
                    resume(index, active.pop(index)[0], walk)
            elif drafting := [i for i in active if isinstance(active[i][1], Draft)]:
                trees, seconds = propose_all(
                    [active[i][1].proposer for i in drafting], [active[i][1].request for i in drafting]
                )
                for index, tree, spent in zip(drafting, trees, seconds):
                    clock[index][3] += spent
                    resume(index, active.pop(index)[0], tree)
            else:
                break
        if not active:
            break
        order = list(active)
        requests = [active[i][1] for i in order]
        before = time.perf_counter()
        outputs = forward_passes(target, requests)
        elapsed = time.perf_counter() - before
        rows = sum(r.rows for r in requests)
        for index, request, output in zip(order, requests, outputs):
            clock[index][1] += elapsed * request.rows / rows
            loop = active.pop(index)[0]
            resume(index, loop, output)
    return [done[i] for i in range(len(done))]


def forward_passes(target: Any, requests: list[Pass]) -> list[Any]:
    """The passes' outputs, in order: a single pass is its session's own `forward` (so a batch of one
    is exactly the unbatched decode), several go through the target's `forward_many`."""
    if len(requests) == 1 or not hasattr(target, "forward_many"):
        outputs = [r.alone() for r in requests]
    else:
        outputs = target.forward_many([r.inputs() for r in requests])
    first = outputs[0]
    synchronize(first if isinstance(first, Tensor) else first.current)
    return outputs

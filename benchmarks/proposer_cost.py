"""What SPOT's proposer costs against the target pass it drafts for (a script, not a test).

Decodes a few arith and GSM8K test prompts speculatively with SPOT (the zoo checkpoint) on every zoo
target and budget, and prints per (target, T, budget), per speculative pass: the target's time, the
proposer's time and `ratio` (proposer / target), the network calls and rows of the batched search
(proposers/spot/tree.py), and, in the same process on the same requests, the time of the search it
replaced (one network call per expanded node, batch 1: `reference_tree` of
tests/proposers/spot/test_tree.py, the reference the tests compare trees with). Both searches run on
every request, alternating which goes first; `same` counts the drafted passes whose trees are
identical (the batched tree drives the decode). Passes include the first pass of each block, where a
block-causal target has no stale view and nothing is drafted.

With `--before REV`, SPOT's network and search as of revision REV (the modules of proposers/spot/,
or in a revision from before the packages proposers/spot.py, spot_tree.py and, where it exists,
spot_kernels.py; compiled apart, the network built from that revision's class with the same weights)
run on the same requests too, timed as `before` at the first lookahead, and `same` also requires
their trees to equal this checkout's.

Clocks: `cpu` (default) is the process's CPU time, which other jobs on a shared machine disturb
less than wall time (still by some 20% when its cores are oversubscribed); `wall` is what
`Metrics.proposer_s` and `target_s` measure. The coupled noise is drawn before the timers: it is the
decoding loop's cost, shared with the verifier.

    python benchmarks/proposer_cost.py [--targets sdar-a,sdar-b,llada-a,dream-a] [--budgets 2,4,8,16]
        [--temperatures 0,1] [--limit 2] [--lookaheads 3] [--clock cpu] [--before REV]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch

from harness.decoding import DecodeConfig, DraftRequest, DraftTree, parse_rule, speculative_decode
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers.spot.network import SpotNet, zoo_spot
from proposers.spot.tree import DEFAULT_LOOKAHEAD, grow
from tasks.base import prompt_ids
from tasks.registry import get_task

CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def load_reference() -> Callable[[SpotNet, DraftRequest], DraftTree]:
    """The batch-1 search, from the test that holds it (one copy of the old algorithm)."""
    path = Path(__file__).resolve().parents[1] / "tests" / "proposers" / "spot" / "test_tree.py"
    spec = importlib.util.spec_from_file_location("spot_tree_reference", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the reference search from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_tree


@dataclass(frozen=True)
class Layout:
    """Where SPOT's network and search live in a revision: the modules `--before` loads from it, in
    import order (one missing from that revision is skipped), and the modules of this checkout its
    code imports under another name."""

    modules: tuple[str, ...]
    network: str
    tree: str
    aliases: dict[str, str] = field(default_factory=dict)


LAYOUTS = (
    Layout(
        ("proposers.spot.kernels", "proposers.spot.features", "proposers.spot.network", "proposers.spot.tree"),
        "proposers.spot.network",
        "proposers.spot.tree",
    ),
    Layout(
        ("proposers.spot_kernels", "proposers.spot", "proposers.spot_tree"),
        "proposers.spot",
        "proposers.spot_tree",
        {"proposers.confidence": "proposers.baselines.confidence"},
    ),
)
"""The package layout (proposers/spot/), then the flat one of older revisions (proposers/spot.py)."""


def source_at(root: Path, revision: str, module: str) -> str | None:
    path = module.replace(".", "/") + ".py"
    shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=root, capture_output=True, text=True)
    return None if shown.returncode else shown.stdout


def search_at(revision: str, net: SpotNet) -> Callable[[DraftRequest, int], DraftTree]:
    """The tree search of `revision` on a network of that revision's class with `net`'s weights:
    its SPOT modules compiled apart, everything else (rules, tree types) from this checkout."""
    root = Path(__file__).resolve().parents[1]
    layout = next((lay for lay in LAYOUTS if source_at(root, revision, lay.network) is not None), None)
    if layout is None:
        raise SystemExit(f"--before {revision}: no SPOT network in that revision")
    loaded: dict[str, types.ModuleType] = {}
    names = (*layout.modules, *layout.aliases)
    saved = {name: sys.modules.get(name) for name in names}
    try:
        for alias, current in layout.aliases.items():
            sys.modules[alias] = importlib.import_module(current)
        for name in layout.modules:
            source = source_at(root, revision, name)
            if source is None:
                continue  # not in that revision
            module = types.ModuleType(name)
            sys.modules[name] = module  # later modules import this revision's
            exec(compile(source, f"{revision}:{name.replace('.', '/')}.py", "exec"), module.__dict__)
            loaded[name] = module
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    network = loaded[layout.network]
    old_net = network.SpotNet(network.SpotConfig(**vars(net.config)))
    old_net.load_state_dict(net.state_dict())
    old_net.eval()
    return lambda request, lookahead: loaded[layout.tree].grow(old_net, request, lookahead)[0]


@dataclass
class Tally:
    clock: Callable[[], float]
    passes: int = 0
    drafted: int = 0
    same: int = 0
    target_s: float = 0.0
    old_s: float = 0.0
    before_s: float = 0.0
    new_s: dict[int, float] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)


class TimedTarget:
    """The target, with each pass (`TargetSession.forward`) timed on the tally's clock."""

    def __init__(self, target, tally: Tally):
        self.target, self.tally = target, tally

    def __getattr__(self, name: str):
        return getattr(self.target, name)

    def start(self, *args):
        return TimedSession(self.target.start(*args), self.tally)


class TimedSession:
    def __init__(self, session, tally: Tally):
        self.session, self.tally = session, tally

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def forward(self, states):
        start = self.tally.clock()
        logits = self.session.forward(states)
        self.tally.target_s += self.tally.clock() - start
        return logits


class SideBySide:
    """A proposer that runs the batched search (each lookahead) and the batch-1 search on every
    request, times each, and drafts the batched tree."""

    def __init__(self, net: SpotNet, lookaheads: list[int], reference, tally: Tally, before=None):
        self.net, self.lookaheads, self.reference, self.tally = net, lookaheads, reference, tally
        self.before = before

    @torch.no_grad()
    def propose(self, request: DraftRequest) -> DraftTree:
        tally, clock = self.tally, self.tally.clock
        tally.passes += 1
        if request.stale is None or request.budget == 0:
            return DraftTree()
        if request.noise:
            for depth in range(request.budget + 1):
                request.noise(request.step + depth)
        trees: dict[int | str | None, DraftTree] = {}
        arms: list[int | str | None] = [*self.lookaheads, None] + (["before"] if self.before else [])
        for lookahead in arms if tally.passes % 2 else arms[::-1]:
            start = clock()
            if lookahead is None:
                trees[None] = self.reference(self.net, request)
                tally.old_s += clock() - start
                continue
            if isinstance(lookahead, str):  # "before"
                trees["before"] = self.before(request, self.lookaheads[0])
                tally.before_s += clock() - start
                continue
            trees[lookahead], inputs = grow(self.net, request, lookahead)
            tally.new_s[lookahead] = tally.new_s.get(lookahead, 0.0) + clock() - start
            tally.calls[lookahead] = tally.calls.get(lookahead, 0) + inputs.calls
            tally.rows[lookahead] = tally.rows.get(lookahead, 0) + inputs.rows
        tally.drafted += 1
        tally.same += all(tree == trees[None] for tree in trees.values())
        return trees[self.lookaheads[0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sdar-a,sdar-b,llada-a,dream-a")
    parser.add_argument("--budgets", default="2,4,8,16")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--tasks", default="arith,gsm8k")
    parser.add_argument("--limit", type=int, default=2, help="test prompts per task")
    parser.add_argument(
        "--lookaheads", default=str(DEFAULT_LOOKAHEAD), help="SpotProposer.lookahead values to time, comma-separated"
    )
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", metavar="REV", help="also time SPOT's network and search at this revision")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lookaheads = [int(x) for x in args.lookaheads.split(",")]
    reference, net = load_reference(), zoo_spot()
    before = search_at(args.before, net) if args.before else None
    print(
        f"SPOT proposer cost per speculative pass ({args.clock} ms), gen {args.gen_length}, block "
        f"{args.block_length}, {args.limit} test prompts of each of {args.tasks}, seed {args.seed}, 1 thread"
    )
    new_head = " ".join(f"{'new@' + str(n):>7s} {'ratio':>5s} {'calls':>5s} {'rows':>5s}" for n in lookaheads)
    before_head = f"{'before':>7s} {'ratio':>5s} " if before else ""
    print(
        f"{'target':8s} {'T':>3s} {'budget':>6s} {'passes':>6s} {'target':>7s} {'old':>7s} {'ratio':>5s} "
        f"{before_head}{new_head} {'same':>9s}"
    )
    for name in args.targets.split(","):
        target = load_dlm_target(name, what="this benchmark")
        rule = parse_rule("top1", target.family, target.mask_id)
        prompts = []
        for task_name in args.tasks.split(","):
            task = get_task(task_name, num_fewshot=0)
            prompts += [prompt_ids(task, sample, target.tokenizer) for sample in task.load("test", limit=args.limit)]
        for temperature in [float(t) for t in args.temperatures.split(",")]:
            config = DecodeConfig(rule, args.gen_length, args.block_length, temperature, args.seed)
            for budget in [int(b) for b in args.budgets.split(",")]:
                tally = Tally(CLOCKS[args.clock])
                for ids in prompts:
                    speculative_decode(
                        cast(DLMTarget, TimedTarget(target, tally)),  # a proxy of the target: its passes timed
                        ids,
                        SideBySide(net, lookaheads, reference, tally, before),
                        config,
                        budget,
                    )
                ms = 1e3 / tally.passes
                target_ms = tally.target_s * ms
                cells = " ".join(
                    f"{tally.new_s[n] * ms:7.2f} {tally.new_s[n] * ms / target_ms:5.2f} "
                    f"{tally.calls[n] / tally.passes:5.2f} {tally.rows[n] / tally.passes:5.2f}"
                    for n in lookaheads
                )
                before_cells = f"{tally.before_s * ms:7.2f} {tally.before_s * ms / target_ms:5.2f} " if before else ""
                print(
                    f"{name:8s} {temperature:3g} {budget:6d} {tally.passes:6d} {target_ms:7.2f} "
                    f"{tally.old_s * ms:7.2f} {tally.old_s * ms / target_ms:5.2f} {before_cells}{cells} "
                    f"{tally.same:4d}/{tally.drafted:<4d}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

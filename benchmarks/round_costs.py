"""What a round of a batch costs per generation: the target's share, the proposer's and the engine's
(a script, not a test).

A round is one target pass over every active generation of a batch (`decode_batch`). Per target,
temperature, arm (plain decoding and each proposer at `--budget`) and batch size, every prompt is
decoded as a run's worker decodes it (`harness.pipeline.decoder`), and the generations' times are
summed and divided by the passes they took part in: `target` (their shares of the passes), `proposer`
(drafting) and `engine` (everything else: rules, noise, tree bookkeeping, the driver). On a
tiny-random target the pass is nearly free, so what is left is the harness's own cost; the columns
`engine+proposer` and `vs b1` (that sum at batch 1 over its value here) are what batching should
shrink.

`--before REV` runs the same measurement on git revision REV (a detached worktree of it, imported
instead of this checkout) in a child process per repetition, alternating with this checkout's child
so that the machine's load hits both alike, and prints REV's table, then this checkout's with the
ratio `REV / now` of engine+proposer per generation per round. Medians over `--reps`. Times are
the decoding thread's CPU time by default (`--clock cpu`: the loop's timers switched to it, as
benchmarks/decoding_overhead.py does), which other jobs on a shared machine disturb far less than
the wall time `Metrics` records (`--clock wall`).

    python benchmarks/round_costs.py [--targets tiny-random:sdar,sdar-a] [--proposers confidence,spot]
        [--budget 8] [--batch-sizes 1,4,16,64] [--prompts 64] [--temperatures 0,1] [--reps 3]
        [--before REV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("target", "proposer", "engine")


def measure(args: argparse.Namespace) -> list[dict]:
    """One repetition of every configuration in this process: one record per (target, T, arm, batch)."""
    import torch

    from harness.decoding import decode_batch
    from harness.pipeline import decoder
    from harness.targets.registry import load_target
    from proposers import build_proposer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from batch_sizes import groups

    torch.set_num_threads(1)
    if args.clock == "cpu":  # a benchmark-only patch of the timers of the decoding core, both revisions
        for name, module in list(sys.modules.items()):
            if name.startswith("harness.decoding") and getattr(module, "time", None) is time:
                vars(module)["time"] = types.SimpleNamespace(perf_counter=time.thread_time)
    records = []
    for model in args.targets.split(","):
        target = load_target(model)
        sizes = [int(b) for b in args.batch_sizes.split(",")]
        prompts = args.prompts if model.startswith("tiny-random") else min(args.prompts, args.real_prompts)
        for temperature in (float(t) for t in args.temperatures.split(",")):
            members = groups(target, model, prompts, temperature, args.gen_length, args.block_length)
            loops = [decoder(target, g) for g in members]
            plains = decode_batch(target, [loop(None, 0) for loop in loops], 1)
            for arm in ["plain", *args.proposers.split(",")]:
                for batch in (b for b in sizes if b <= len(loops)):
                    if arm == "plain":
                        made = [loop(None, 0) for loop in loops]
                    else:
                        made = [loop(build_proposer(arm, target, p), args.budget) for loop, p in zip(loops, plains)]
                    print(f"{model} T={temperature:g} {arm} batch {batch}", file=sys.stderr, flush=True)
                    generations = decode_batch(target, made, batch)
                    metrics = [g.metrics for g in generations]
                    passes = sum(m.nfe for m in metrics)
                    wall, share, drafting = (
                        sum(getattr(m, k) for m in metrics) for k in ("wall_s", "target_s", "proposer_s")
                    )
                    records.append(
                        {
                            "key": [model, temperature, arm, batch],
                            "target": 1000 * share / passes,
                            "proposer": 1000 * drafting / passes,
                            "engine": 1000 * (wall - share - drafting) / passes,
                            "tokens": [list(g.answer_ids) for g in generations],
                        }
                    )
    return records


def child(revision_root: Path, args: argparse.Namespace) -> list[dict]:
    """`measure` in a child process that imports the tree at `revision_root`."""
    argv = [sys.executable, __file__, "--child"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("before", "child")
    ]
    env = dict(os.environ, PYTHONPATH=str(revision_root), OMP_NUM_THREADS="1")
    out = subprocess.run(argv, env=env, cwd=revision_root, stdout=subprocess.PIPE, text=True)
    if out.returncode:
        raise SystemExit(f"the measurement at {revision_root} failed (its error is above)")
    return json.loads(out.stdout.splitlines()[-1])


def worktree(revision: str) -> Path:
    """A detached worktree of `revision` (created once, under /tmp)."""
    sha = subprocess.run(["git", "rev-parse", revision], cwd=ROOT, capture_output=True, text=True, check=True)
    path = Path("/tmp") / f"round-costs-{sha.stdout.strip()[:12]}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha.stdout.strip()], cwd=ROOT, check=True)
    return path


def table(title: str, runs: list[list[dict]], base: dict[tuple, float] | None) -> dict[tuple, float]:
    """Print the medians of `runs` (repetitions of `measure`); returns engine+proposer by key."""
    values: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for record in run:
            for column in COLUMNS:
                values[tuple(record["key"])][column].append(record[column])
    harness = {k: statistics.median(v["engine"]) + statistics.median(v["proposer"]) for k, v in values.items()}
    print(f"\n{title}: ms per generation per round (medians of {len(runs)})")
    header = ["target", "T", "arm", "batch", *COLUMNS, "engine+proposer", "vs b1"] + (["before / now"] if base else [])
    lines = [header]
    for key, v in values.items():
        model, temperature, arm, batch = key
        first = harness[(model, temperature, arm, min(k[3] for k in values if k[:3] == key[:3]))]
        row = [model, f"{temperature:g}", arm, str(batch)] + [f"{statistics.median(v[c]):.3f}" for c in COLUMNS]
        row += [f"{harness[key]:.3f}", f"{first / harness[key]:.2f}x"]
        if base:
            row.append(f"{base[key] / harness[key]:.2f}x" if key in base else "-")
        lines.append(row)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print("\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines))
    return harness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="tiny-random:sdar,sdar-a")
    parser.add_argument("--proposers", default="confidence,spot")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--batch-sizes", default="1,4,16,64")
    parser.add_argument("--prompts", type=int, default=64, help="arith test prompts on tiny-random targets")
    parser.add_argument("--real-prompts", type=int, default=16, help="arith test prompts on other targets")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: the decoding thread's CPU time (one torch thread; other jobs disturb it far less); wall: Metrics'",
    )
    parser.add_argument("--before", help="a git revision to measure side by side with this checkout")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    now: list[list[dict]] = []
    before: list[list[dict]] = []
    other = worktree(args.before) if args.before else None
    for rep in range(args.reps):
        order = [(ROOT, now)] + ([(other, before)] if other else [])
        for root, runs in order if rep % 2 == 0 else reversed(order):
            runs.append(child(root, args))
    base = None
    if other:
        base = table(f"{args.before} ({other})", before, None)
        same = all(a["tokens"] == b["tokens"] for a, b in zip(before[0], now[0]))
        print(f"tokens equal to {args.before}'s in every configuration: {same}")
    table("this checkout", now, base)


if __name__ == "__main__":
    main()

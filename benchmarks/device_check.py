"""The device check: every zoo target on a GPU, fast (bf16, batched tree rows) and exact (float64, rows
one by one), through the one arm pipeline (a script, not a test: CI never needs a GPU).

Prints one table: per target, mode, proposer and budget, the exact rate (fast mode: divergences must
all be near-ties; exactness mode: all exact), speedup_nfe, speedup_wall, tokens/s of plain and
speculative decoding and the proposer's share of the wall time. Sized for at most 5 minutes on one
GPU (a few arith test prompts per target; the models are tiny, so this checks placement, exactness
and throughput accounting, not the headline speedups of 8B models).

    python benchmarks/device_check.py                      # cuda, bf16 and exact
    python benchmarks/device_check.py --device cpu --limit 1 --budgets 2   # a smoke run without a GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import pyarrow as pa
import torch

from harness.lossless import near_tie_tolerance
from harness.pipeline import Group, Score, decode_group
from harness.runs.schema import ROW_SCHEMA
from harness.runs.summary import summarize
from harness.targets.registry import load_target
from harness.targets.zoo import zoo_names
from proposers import arms, build_proposer
from tasks.base import prompt_ids
from tasks.registry import get_task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--targets", default=",".join(zoo_names()))
    parser.add_argument("--proposers", default="confidence,spot")
    parser.add_argument("--budgets", default="2,4,8,16")
    parser.add_argument("--limit", type=int, default=4, help="arith test prompts per target")
    parser.add_argument("--temperatures", default="0,1")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("device_check: no CUDA GPU is visible; use --device cpu for a smoke run", file=sys.stderr)
        return 2
    task = get_task("arith", num_fewshot=0)
    samples = task.load("test", limit=args.limit)
    chosen = arms(args.proposers.split(","), [int(b) for b in args.budgets.split(",")])
    device = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    print(f"device {args.device}: {device}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    header = (
        f"{'target':<8} {'mode':<6} {'T':>3} {'proposer':<11} {'budget':>6} {'exact':>6} {'speedup_nfe':>11} "
        f"{'speedup_wall':>12} {'plain tok/s':>11} {'spec tok/s':>10} {'proposer':>8}"
    )
    print(header)
    for name in args.targets.split(","):
        for mode in ("bf16", "exact"):
            started = time.perf_counter()
            target = load_target(name, device=args.device, dtype="bfloat16")
            if mode == "exact":
                target = target.exact()
            load_s = time.perf_counter() - started
            rows = []
            for temperature in (float(t) for t in args.temperatures.split(",")):
                for sample in samples:
                    ids = tuple(prompt_ids(task, sample, target.tokenizer))
                    group = Group(name, "arith", sample.sample_id, ids, temperature, "top1", 0, 64, 32)

                    def score(completion: str, sample=sample) -> Score:
                        result = task.score([sample], [completion])[0]
                        return Score(bool(result["correct"]), result)

                    rows += [
                        dataclasses.asdict(r)
                        for r in decode_group(
                            target,
                            group,
                            chosen,
                            build_proposer,
                            score,
                            mode == "exact",
                            near_tie_tolerance(target.dtype),
                        )
                    ]
            for row in summarize(pa.Table.from_pylist(rows, schema=ROW_SCHEMA)).to_pylist():
                print(
                    f"{name:<8} {mode:<6} {row['temperature']:>3g} {row['proposer']:<11} {row['budget']:>6} "
                    f"{row['exact_rate']:>6.0%} {row['speedup_nfe']:>10.2f}x {row['speedup_wall']:>11.2f}x "
                    f"{row['plain_tokens_per_s']:>11.1f} {row['spec_tokens_per_s']:>10.1f} "
                    f"{row['proposer_share']:>8.0%}"
                )
            memory = (
                f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB"
                if args.device.startswith("cuda")
                else ""
            )
            print(f"# {name} {mode}: loaded in {load_s:.1f} s{memory}")
            del target
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The device check: every zoo target on a GPU (diffusion and autoregressive, each with its own
proposers and rule), fast (bf16, batched tree rows) and exact (float64, rows
one by one), through the one arm pipeline (a script, not a test: CI never needs a GPU).

First a line on the coupled noise drawn on the device (`harness.decoding.noise.device_gumbel`):
whether its uniforms equal numpy's bit for bit, how far its Gumbel values are from numpy's, and one
verifier depth of a batch (16 generations x 16 masked rows of a 151,936-token vocabulary) drawn
there against drawn by numpy and copied over. Then one table: per target, mode, proposer and
budget, the exact rate (fast mode: divergences must all be near-ties; exactness mode: all exact),
speedup_nfe, speedup_wall, tokens/s of plain and speculative decoding and the proposer's share of
the wall time. Sized for at most 5 minutes on one
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

from harness.decoding.autoregressive import AR_RULE
from harness.decoding.generation import synchronize
from harness.decoding.noise import device_gumbel, device_uniforms, gumbel_rows, numpy_uniforms
from harness.lossless import near_tie_tolerance
from harness.pipeline import Group, Score, decode_group
from harness.runs.schema import ROW_SCHEMA
from harness.runs.summary import summarize
from harness.targets.registry import load_target, target_kind
from harness.targets.zoo import zoo_names
from proposers import arms, build_proposer
from tasks.base import prompt_ids
from tasks.registry import get_task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--targets", default=",".join(zoo_names()))
    parser.add_argument("--proposers", default="confidence,spot", help="for diffusion targets")
    parser.add_argument("--ar-proposers", default="draft-model:ar-a-draft,prompt-lookup", help="for AR targets")
    parser.add_argument("--budgets", default="2,4,8,16")
    parser.add_argument("--limit", type=int, default=4, help="arith test prompts per target")
    parser.add_argument("--temperatures", default="0,1")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("device_check: no CUDA GPU is visible; use --device cpu for a smoke run", file=sys.stderr)
        return 2
    task = get_task("arith", num_fewshot=0)
    samples = task.load("test", limit=args.limit)
    budgets: list[int | str] = [int(b) for b in args.budgets.split(",")]
    chosen = {"dlm": arms(args.proposers.split(","), budgets), "ar": arms(args.ar_proposers.split(","), budgets)}
    rules = {"dlm": "top1", "ar": AR_RULE}
    device = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    print(f"device {args.device}: {device}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    header = (
        f"{'target':<16} {'mode':<6} {'T':>3} {'proposer':<22} {'budget':>6} {'exact':>6} {'speedup_nfe':>11} "
        f"{'speedup_wall':>12} {'plain tok/s':>11} {'spec tok/s':>10} {'proposer':>8}"
    )
    print(noise_check(torch.device(args.device)))
    print(header)
    for name in args.targets.split(","):
        kind = target_kind(name)
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
                    group = Group(name, "arith", sample.sample_id, ids, temperature, rules[kind], 0, 64, 32)

                    def score(completion: str, sample=sample) -> Score:
                        result = task.score([sample], [completion])[0]
                        return Score(bool(result["correct"]), result)

                    rows += [
                        dataclasses.asdict(r)
                        for r in decode_group(
                            target,
                            group,
                            chosen[kind],
                            build_proposer,
                            score,
                            mode == "exact",
                            near_tie_tolerance(target.dtype),
                        )
                    ]
            for row in summarize(pa.Table.from_pylist(rows, schema=ROW_SCHEMA)).to_pylist():
                print(
                    f"{name:<16} {mode:<6} {row['temperature']:>3g} {row['proposer']:<22} {row['budget']:>6} "
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


def noise_check(device: torch.device) -> str:
    """The device's noise against numpy's, and one batched verifier depth's draw timed both ways."""
    vocab, keys = 151_936, [(2**63 + seed, 40, list(range(16))) for seed in range(16)]
    same = all(
        bool((device_uniforms([key], vocab, device).cpu().flatten().numpy() == numpy_uniforms(*key, vocab)).all())
        for key in keys[:2]
    )
    gap = float((device_gumbel(keys[:1], vocab, device).cpu() - gumbel_rows(*keys[0], vocab)).abs().max())  # warm
    seconds = {}
    for way in ("numpy", "device"):
        started = time.perf_counter()
        if way == "numpy":
            drawn = torch.cat([gumbel_rows(*key, vocab) for key in keys]).to(device)
        else:
            drawn = device_gumbel(keys, vocab, device)
        synchronize(drawn)
        seconds[way] = time.perf_counter() - started
    return (
        f"noise on {device}: uniforms equal numpy's bit for bit: {same}; largest Gumbel difference {gap:.1e}; "
        f"16 x 16 rows x {vocab}: numpy and copy {1000 * seconds['numpy']:.1f} ms, device "
        f"{1000 * seconds['device']:.1f} ms ({seconds['numpy'] / seconds['device']:.1f}x)"
    )


if __name__ == "__main__":
    sys.exit(main())

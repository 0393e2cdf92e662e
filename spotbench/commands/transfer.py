"""`spotbench transfer`: one SPOT checkpoint on several targets, without retraining, beside the
training-free confidence proposers and the oracle.

Per eval target and temperature every prompt is decoded plainly once; each (proposer, budget) arm is
decoded speculatively and checked against it (near-tie tolerance of the target's dtype). One row per
(train_target, eval_target, proposer, task, temperature, budget): `speedup_nfe` = plain nfe / spec nfe
summed over prompts, `exact_rate`, `mean_accept_len` and `oracle_fraction` (speedup over the oracle's
at the same budget), each speedup with its 95% interval over resampled prompts (`speedup_nfe_ci95`,
`harness/bootstrap.py`). `train_target` is the checkpoint's training target for SPOT, null otherwise.
`--workers N` decodes N prompts at once as Ray tasks (one CPU each) and gathers them in prompt order,
so the rows are the same for any N; `--address` runs those tasks on an existing Ray cluster.
SPOT's rows also give `vs_best_baseline`: its speedup over the best training-free baseline's
(`best_baseline`) at the same budget, with `vs_best_baseline_ci95`.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transfer", help="a SPOT checkpoint on several targets beside confidence and oracle"
    )
    parser.add_argument("--proposer-checkpoint", required=True, help="SPOT checkpoint folder")
    parser.add_argument("--targets", default="sdar-a,llada-a,dream-a,sdar-b")
    parser.add_argument("--task", default="arith")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--budgets", default="4,8,16")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--baselines", default="oracle,confidence,confidence-branch")
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="sample i decodes with seed + i")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--workers", type=int, default=1,
                        help="decode this many prompts at once (Ray, one CPU each; the rows do not change)")
    parser.add_argument("--address", help="decode on an existing Ray cluster (host:port or auto); default: local")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from cluster.runner import check_address
    from harness.errors import UserError
    from proposers.spot import CONFIG_FILE, load_spot
    from tasks.registry import get_task

    folder = Path(args.proposer_checkpoint)
    if not (folder / CONFIG_FILE).exists():
        raise UserError(f"no SPOT checkpoint in {folder} (expected {CONFIG_FILE})")
    if args.limit <= 0:
        raise UserError(f"--limit must be positive, got {args.limit}")
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1, not {args.workers}")
    if args.address:
        check_address(args.address)  # now, not after the targets load
    net = load_spot(folder)
    train_target = json.loads((folder / CONFIG_FILE).read_text()).get("provenance", {}).get("target")
    budgets = [int(b) for b in args.budgets.split(",")]
    temperatures = [float(t) for t in args.temperatures.split(",")]
    arms = [*args.baselines.split(","), "spot"]
    task = get_task(args.task, num_fewshot=0)
    samples = task.load(args.split, limit=args.limit)
    targets = args.targets.split(",")
    for name in targets:
        _target(name)  # a bad name or checkpoint fails here, with one line, not inside a Ray task
    jobs = [PromptJob(name, args.task, sample, temperature, args.seed + index, args.gen_length, args.block_length)
            for name in targets for temperature in temperatures for index, sample in enumerate(samples)]
    passes: dict[tuple[str, float], dict[tuple[str, int], list]] = {}
    with tqdm(total=len(jobs), desc="transfer", unit="prompt") as progress:
        for job, result in zip(jobs, _results_in_order(jobs, net, arms, budgets, args.workers, args.address), strict=True):
            cell = passes.setdefault((job.target, job.temperature), {(a, b): [] for a in arms for b in budgets})
            for key, value in result.items():
                cell[key].append(value)
            progress.update()
    rows = []
    for (name, temperature), cell in passes.items():
        for budget in budgets:
            common = {"eval_target": name, "task": args.task, "split": args.split, "temperature": temperature,
                      "budget": budget, "prompts": len(samples)}
            rows.extend(budget_rows({arm: cell[arm, budget] for arm in arms}, train_target, common))
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            low, high = row["speedup_nfe_ci95"]
            print(f"{row['eval_target']:<10} T={row['temperature']:<4g} b={row['budget']:<3} {row['proposer']:<18} "
                  f"speedup_nfe {row['speedup_nfe']:.3f} [{low:.2f}, {high:.2f}]  exact {row['exact_rate']:.2f}"
                  + (f"  of oracle {row['oracle_fraction']:.2f}" if row["oracle_fraction"] else "")
                  + (f"  vs {row['best_baseline']} {row['vs_best_baseline']:.3f} [{row['vs_best_baseline_ci95'][0]:.3f},"
                     f" {row['vs_best_baseline_ci95'][1]:.3f}]" if row["vs_best_baseline"] else ""))
    return 0


@dataclass(frozen=True)
class PromptJob:
    """One prompt of one eval target at one temperature: what a worker needs to decode it."""

    target: str
    task: str
    sample: dict
    temperature: float
    seed: int
    gen_length: int
    block_length: int


@functools.cache
def _target(name: str):
    """Targets load once per process (a Ray worker decodes many prompts of the same target)."""
    from harness.targets.registry import load_target

    return load_target(name)


def prompt_passes(job: PromptJob, net, arms: list[str], budgets: list[int]) -> dict[tuple[str, int], tuple]:
    """(plain nfe, speculative nfe, exact, commits) per (arm, budget): the prompt decoded plainly once,
    then by every arm, each checked against plain (near-tie tolerance of the target's dtype)."""
    import torch

    from harness.decoding import DecodeConfig, parse_rule, plain_decode, speculative_decode
    from harness.lossless import check_lossless, near_tie_tolerance
    from proposers import build_proposer
    from proposers.spot import SpotProposer
    from tasks.base import prompt_ids
    from tasks.registry import get_task

    target = _target(job.target)
    rule = parse_rule("top1", target.family, target.mask_id)
    ids = prompt_ids(get_task(job.task, num_fewshot=0), job.sample, target.tokenizer)
    config = DecodeConfig(rule, job.gen_length, job.block_length, job.temperature, job.seed)
    out = {}
    with torch.no_grad():
        plain = plain_decode(target, ids, config)
        for arm in arms:
            for budget in budgets:
                proposer = SpotProposer(net) if arm == "spot" else build_proposer(arm, target, plain)
                spec = speculative_decode(target, ids, proposer, config, budget)
                exact = check_lossless(plain, spec, near_tie_tolerance(target.dtype)).exact
                out[arm, budget] = (plain.metrics.nfe, spec.metrics.nfe, exact, spec.metrics.commits)
    return out


def _results_in_order(jobs: list[PromptJob], net, arms: list[str], budgets: list[int], workers: int,
                      address: str | None) -> Iterator[dict]:
    """Each job's passes in job order: here, or as Ray tasks with `workers` in flight (on the cluster
    at `address`, if given)."""
    if workers <= 1 and address is None:
        return (prompt_passes(job, net, arms, budgets) for job in jobs)
    from cluster.ordered import map_in_order

    return map_in_order(prompt_passes, jobs, (net, arms, budgets), workers, address)


def budget_rows(passes: dict[str, list[tuple[int, int, bool, int]]], train_target: str | None, common: dict
                ) -> list[dict]:
    """The rows of one (eval target, temperature, budget) from each arm's per-prompt passes.

    SPOT's row also compares it with the best training-free baseline at this budget (`oracle`
    excluded): the issue's floor is on that ratio, and its interval (prompts resampled once for all
    arms, the best baseline taken again in every draw) says whether the prompts could explain the gap.
    """
    from harness.bootstrap import interval, resampled_speedups, versus_best

    plain = [p[0] for p in next(iter(passes.values()))]
    speedup = {arm: sum(plain) / sum(p[1] for p in runs) for arm, runs in passes.items()}
    draws = resampled_speedups(plain, {arm: [p[1] for p in runs] for arm, runs in passes.items()})
    baselines = [arm for arm in passes if arm not in ("oracle", "spot")]
    best = max(baselines, key=speedup.__getitem__) if baselines else None
    rows = []
    for arm, runs in passes.items():
        versus = arm == "spot" and best is not None
        rows.append({
            "train_target": train_target if arm == "spot" else None, **common, "proposer": arm,
            "speedup_nfe": speedup[arm], "speedup_nfe_ci95": interval(draws[arm]),
            "mean_accept_len": sum(p[3] for p in runs) / sum(p[1] for p in runs),
            "exact_rate": sum(p[2] for p in runs) / len(runs),
            "oracle_fraction": speedup[arm] / speedup["oracle"] if "oracle" in speedup else None,
            "best_baseline": best if versus else None,
            "vs_best_baseline": speedup[arm] / speedup[best] if versus else None,
            "vs_best_baseline_ci95": interval(versus_best(draws[arm], [draws[b] for b in baselines]))
            if versus else None,
        })
    return rows

"""Proposers side by side on recorded plain generations: passes saved, in seconds (a script, not a test).

Each prompt is decoded plainly once with its logits kept; every proposer (registry names and SPOT
checkpoint folders) at every budget is then scored by `harness.decoding.replay`, which gives the
pass count speculative decoding would make without running it (exact when a state's logits do not
depend on its batch; see that module). The table prints speedup_nfe (plain passes / speculative
passes, summed over prompts) and, for every proposer that is not a baseline, its ratio to the best
of `confidence` and `confidence-branch` at the same budget with a 95% interval over resampled
prompts (`harness/bootstrap.py`), and plain decoding's accuracy with its 95% Wilson interval. A
prompt's logits are dropped once its arms are replayed, so a wide-block target of a large vocabulary
fits in memory at any `--limit`; stderr gets each prompt's CPU seconds, plain and replayed. Exactness
and wall time need real decoding (`spotbench run --transfer`); this is the quick loop for comparing
checkpoints. `--stops` adds, per arm and budget, why its passes stopped
(`harness.decoding.tree.stop_reason`): at a leaf, on a position no child drafted, on a drafted
position with another token, or with nothing drafted.

    python benchmarks/replay_proposers.py --targets sdar-a,dream-a --tasks arith,gsm8k --limit 40 \\
        --proposers confidence,confidence-branch,spot --checkpoints /tmp/my-spot,/tmp/run1+/tmp/run2

`--rule threshold:TAU` replays every arm under that rule (plain threshold decoding is the reference).
Proposers are registry names (`spiffy:DIR` and `spot:PATH` included); a Spiffy graph calibrated for
another target or block length is refused (`proposers.check_arm_for_model`).

Choosing between checkpoints on test prompts makes the test numbers optimistic: `--split train
--start N` replays train prompts past the ones a recipe collected (the registry's `spot` was trained
on arith 0-499 and GSM8K 0-2999, `zoo/proposers/spot-sdar-a` on arith 0-499 and GSM8K 0-1499).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import cast

from harness.bootstrap import interval, resampled_speedups, versus_best
from harness.decoding import DecodeConfig, Generation, parse_rule, plain_decode
from harness.decoding.replay import replay
from harness.decoding.tree import LEAF, NO_DRAFT, POSITION, TOKEN, Proposer
from harness.gate import wilson_interval
from harness.pipeline import decode_text
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer, check_arm_for_model
from proposers.spot.network import SpotEnsemble, SpotNet, load_spot
from proposers.spot.tree import SpotProposer
from tasks.base import Sample, Task, prompt_ids
from tasks.registry import get_task

BASELINES = ("confidence", "confidence-branch")


def stop_shares(replays: list[Generation]) -> str:
    counts = Counter(stop for r in replays for stop in r.stops or ())
    total = max(1, sum(counts.values()))
    return ", ".join(f"{reason} {counts[reason] / total:.2f}" for reason in (LEAF, POSITION, TOKEN, NO_DRAFT))


def registry_arm(name: str, target: DLMTarget) -> Callable[[Generation], Proposer]:
    """The registry's proposer `name` for each plain generation (a diffusion target's: a `Proposer`)."""
    return lambda plain: cast(Proposer, build_proposer(name, target, plain))


def spot_arm(net: SpotNet | SpotEnsemble) -> Callable[[Generation], Proposer]:
    return lambda plain: SpotProposer(net)


def versus_best_column(arm: str, speedups: dict, draws: dict, budgets: list[int], baselines: list[str]) -> str:
    """Per budget: the arm's speedup over the best baseline's, and that ratio's 95% interval."""
    cells = []
    for i, budget in enumerate(budgets):
        best = max(speedups[n][i] for n in baselines)
        low, high = interval(versus_best(draws[arm, budget], [draws[n, budget] for n in baselines]))
        cells.append(f"{speedups[arm][i] / best:.3f} [{low:.3f}, {high:.3f}]")
    return " ".join(cells)


def replay_prompts(
    target: DLMTarget,
    task: Task,
    samples: list[Sample],
    configs: list[DecodeConfig],
    arms: dict[str, Callable[[Generation], Proposer]],
    budgets: list[int],
) -> tuple[list[Generation], dict[str, list[list[Generation]]]]:
    """Each prompt's plain generation and every (arm, budget) replay of it, a prompt at a time: a
    plain generation's logits ([steps, block, vocab]: ~190 MB for an arith answer of a 49k-vocabulary
    target at block 16) are dropped once its arms are replayed, so memory holds one prompt's."""
    plains: list[Generation] = []
    replays: dict[str, list[list[Generation]]] = {arm: [[] for _ in budgets] for arm in arms}
    for i, (sample, config) in enumerate(zip(samples, configs)):
        started = time.process_time()
        plain = plain_decode(target, prompt_ids(task, sample, target.tokenizer), config, keep_logits=True)
        decoded = time.process_time()
        for arm, make in arms.items():
            for runs, budget in zip(replays[arm], budgets):
                runs.append(replay(plain, make(plain), config, budget))
        plains.append(dataclasses.replace(plain, pass_logits=None, following=None))
        print(
            f"# prompt {i}: {plain.metrics.nfe} plain passes, CPU {decoded - started:.1f} s plain, "
            f"{time.process_time() - decoded:.1f} s replaying {len(arms)} arms x {len(budgets)} budgets",
            file=sys.stderr,
            flush=True,
        )
    return plains, replays


def accuracy_line(
    target: DLMTarget, task: Task, samples: list[Sample], plains: list[Generation], target_name: str, temperature: float
) -> str:
    """Plain decoding's accuracy on these prompts, with its 95% Wilson interval (`harness.gate`)."""
    scores = task.score(samples, [decode_text(target, p.answer_ids) for p in plains])
    correct = sum(bool(s["correct"]) for s in scores)
    low, high = wilson_interval(correct, len(plains))
    return (
        f"# {target_name} {task.name} T={temperature:g}: plain accuracy {correct}/{len(plains)} = "
        f"{correct / len(plains):.1%} [95% {low:.1%}, {high:.1%}], {sum(p.metrics.nfe for p in plains)} plain passes"
    )


def load_checkpoints(spec: str) -> SpotNet | SpotEnsemble:
    """One checkpoint folder, or several joined by '+' as one ensemble."""
    nets = [load_spot(folder) for folder in spec.split("+")]
    return nets[0] if len(nets) == 1 else SpotEnsemble(nets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sdar-a,dream-a,sdar-b,llada-a")
    parser.add_argument("--tasks", default="arith,gsm8k")
    parser.add_argument("--split", default="test")
    parser.add_argument("--start", type=int, default=0, help="skip the split's first prompts")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0, help="prompt i (from --start) decodes with seed + i")
    parser.add_argument("--budgets", default="4,8,16")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--proposers", default="confidence,confidence-branch,spot")
    parser.add_argument(
        "--rule", default="top1", help="top1 or threshold:TAU (plain decoding under it is the reference)"
    )
    parser.add_argument(
        "--checkpoints",
        default="",
        help="comma-separated SPOT checkpoint folders; "
        "DIR1+DIR2 is one arm, the ensemble of both (proposers.spot.network.SpotEnsemble)",
    )
    parser.add_argument("--gen-length", type=int, default=64)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--stops", action="store_true", help="also print why each arm's passes stopped")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    names = args.proposers.split(",")
    nets = {"+".join(Path(f).name for f in c.split("+")): load_checkpoints(c) for c in args.checkpoints.split(",") if c}
    print(
        f"{'target':8s} {'task':6s} {'T':>3s} {'proposer':18s} "
        + " ".join(f"b={b:<5d}" for b in budgets)
        + "  vs best confidence"
    )
    for target_name, name in itertools.product(args.targets.split(","), names):
        check_arm_for_model(name, target_name, args.block_length, [args.rule])  # before any decoding: a fitted arm
    for target_name in args.targets.split(","):
        target = load_dlm_target(target_name, what="this benchmark")
        rule = parse_rule(args.rule, target.family, target.mask_id)
        for task_name in args.tasks.split(","):
            task = get_task(task_name, num_fewshot=0)
            samples = task.load(args.split, limit=args.start + args.limit)[args.start :]
            for temperature in (float(t) for t in args.temperatures.split(",")):
                configs = [
                    DecodeConfig(rule, args.gen_length, args.block_length, temperature, args.seed + i)
                    for i in range(len(samples))
                ]
                arms = {n: registry_arm(n, target) for n in names} | {n: spot_arm(net) for n, net in nets.items()}
                plains, replays = replay_prompts(target, task, samples, configs, arms, budgets)
                plain_nfe = sum(p.metrics.nfe for p in plains)
                print(accuracy_line(target, task, samples, plains, target_name, temperature), flush=True)
                speedups = {
                    arm: [plain_nfe / sum(r.metrics.nfe for r in runs) for runs in per_budget]
                    for arm, per_budget in replays.items()
                }
                draws = resampled_speedups(
                    [p.metrics.nfe for p in plains],
                    {
                        (arm, b): [r.metrics.nfe for r in runs]
                        for arm, per_budget in replays.items()
                        for b, runs in zip(budgets, per_budget)
                    },
                )
                baselines = [n for n in BASELINES if n in speedups]
                for arm, values in speedups.items():
                    ratio = (
                        ""
                        if arm in BASELINES or not baselines
                        else versus_best_column(arm, speedups, draws, budgets, baselines)
                    )
                    print(
                        f"{target_name:8s} {task_name:6s} {temperature:3g} {arm:18s} "
                        + " ".join(f"{v:<7.2f}" for v in values)
                        + f"  {ratio}",
                        flush=True,
                    )
                    if args.stops:
                        for budget, runs in zip(budgets, replays[arm]):
                            print(f"{'':38s} stops at b={budget}: {stop_shares(runs)}")


if __name__ == "__main__":
    main()

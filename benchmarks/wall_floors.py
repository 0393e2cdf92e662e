"""The wall-time floors of a throughput run, read off its summary (a script, not a test).

For a run with the confidence and SPOT proposers at fixed budgets and `auto` (docs/throughput.md):
per (model, T) a table of speedup_nfe and speedup_wall per budget with each arm's wall split, then
the floors: SPOT's speedup_wall against confidence's at every budget where SPOT saves at least 10%
more passes; SPOT at `auto` against 1.4x; each proposer's `auto` against its best fixed budget
(within 5%). Times are what the run measured (same worker, plain and speculative interleaved per
prompt); say what the machine's load was beside them.

    spotbench run --models sdar-a --proposers confidence,spot --budgets 1,2,3,4,6,8,12,16,auto \\
        --temperatures 0,1 --workers 1 -o runs/floors
    python benchmarks/wall_floors.py runs/floors [more run directories]
"""

from __future__ import annotations

import sys
from collections import defaultdict

from harness.pipeline import AUTO
from harness.runs.run_dir import RunDir
from harness.runs.summary import summarize

PROPOSERS = ("confidence", "spot")


def main() -> None:
    for path in sys.argv[1:]:
        summary = summarize(RunDir.existing(path).read_rows()).to_pylist()
        panels: dict[tuple, dict[tuple[str, int], dict]] = defaultdict(dict)
        for r in summary:
            if r["proposer"] in PROPOSERS:
                panels[r["model"], r["task"], r["temperature"]][r["proposer"], r["budget"]] = r
        for (model, task, temperature), arms in sorted(panels.items()):
            print(f"\n{model} {task} T={temperature:g} ({path})")
            print(
                f"{'proposer':<11} {'budget':>7} {'n':>3} {'speedup_nfe':>11} {'speedup_wall':>12} "
                f"{'target':>7} {'proposer':>8} {'engine':>7} {'plain engine':>12}"
            )
            for (proposer, budget), r in sorted(arms.items(), key=lambda a: (a[0][0], a[0][1] == AUTO, a[0][1])):
                label = f"auto:{','.join(map(str, r['chosen_budgets']))}" if budget == AUTO else str(budget)
                engine = 1 - r["target_share"] - r["proposer_share"]
                print(
                    f"{proposer:<11} {label:>7} {r['n']:>3} {r['speedup_nfe']:>10.2f}x {r['speedup_wall']:>11.2f}x "
                    f"{r['target_share']:>7.0%} {r['proposer_share']:>8.0%} {engine:>7.0%} "
                    f"{r['plain_engine_share']:>12.0%}"
                )
            floors(arms)


def floors(arms: dict[tuple[str, int], dict]) -> None:
    fixed = sorted({b for _, b in arms if b != AUTO})
    wall = {key: r["speedup_wall"] for key, r in arms.items()}
    nfe = {key: r["speedup_nfe"] for key, r in arms.items()}
    saving = [
        b
        for b in fixed
        if ("spot", b) in arms and ("confidence", b) in arms and nfe["spot", b] >= 1.1 * nfe["confidence", b]
    ]
    beaten = [b for b in saving if wall["spot", b] < wall["confidence", b]]
    print(
        f"floor SPOT wall >= confidence wall where SPOT saves >= 10% more passes (budgets {saving}): "
        f"{'met' if not beaten else f'not met at budgets {beaten}'}"
    )
    if ("spot", AUTO) in arms:
        verdict = "met" if wall["spot", AUTO] >= 1.4 else "not met"
        print(f"floor SPOT auto >= 1.4x: {wall['spot', AUTO]:.2f}x, {verdict}")
    for proposer in PROPOSERS:
        if (proposer, AUTO) not in arms:
            continue
        best = max((b for b in fixed if (proposer, b) in arms), key=lambda b: wall[proposer, b])
        ratio = wall[proposer, AUTO] / wall[proposer, best]
        print(
            f"floor {proposer} auto within 5% of its best fixed budget ({best}: {wall[proposer, best]:.2f}x): "
            f"{ratio:.1%} of it, {'met' if ratio >= 0.95 else 'not met'}"
        )


if __name__ == "__main__":
    main()

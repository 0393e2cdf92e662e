"""`spotbench run`: a suite (YAML file and/or flags) over Ray workers into a resumable run directory.

With no arguments it runs the embedded default suite (`cluster.suite.Suite`). A completed run
directory holds the manifest, the per-sample files, summary.parquet, results.json (lm-eval's shape:
`harness.runs.lm_eval`) and report.html. Re-running the same
command resumes: finished groups are skipped. Exit status: 0 when the run completes, 2 for bad input
(unknown name, malformed YAML, an output directory of a different config, no Ray cluster at
--address), 130 when interrupted. Correctness verdicts are the gate's job (`spotbench gate`), not this command's.
"""

from __future__ import annotations

import argparse
import sys

from spotbench.commands import add_block_length_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run a benchmark suite over Ray workers into a run directory")
    parser.add_argument("--suite", help="YAML suite file (flags override its settings)")
    parser.add_argument("--output", "-o", help="run directory (default: runs/<suite name>)")
    # values stay text here: the suite's field validators check them, as they check a suite file
    parser.add_argument("--models", help="comma-separated targets")
    parser.add_argument("--proposers", help="comma-separated proposers")
    parser.add_argument("--tasks", help="comma-separated tasks; ids:FILE.jsonl for token-id prompts")
    parser.add_argument("--split")
    parser.add_argument("--limit", help="prompts per task")
    parser.add_argument("--temperatures", help="comma-separated temperatures >= 0")
    parser.add_argument("--rules", help="top1 and/or threshold:TAU, TAU in (0, 1]")
    parser.add_argument("--budgets", help="comma-separated draft budgets >= 0")
    parser.add_argument("--seeds", help="comma-separated seeds in [0, 2**64)")
    parser.add_argument(
        "--batch-size",
        help="prompts a worker decodes together (default 8); comma-separated "
        "sizes give one table per size (e.g. 1,4,16)",
    )
    parser.add_argument(
        "--reference-checks",
        help="plain references per worker unit decoded again alone to check the batched ones (default 1)",
    )
    parser.add_argument("--gen-length")
    add_block_length_arguments(parser)
    parser.add_argument("--fewshot", help="few-shot examples for tasks that have them")
    parser.add_argument("--mask-id", help="mask token id of every diffusion target, overriding config and tokenizer")
    parser.add_argument("--eos-id", help="end-of-sequence token id of every target, overriding config and tokenizer")
    parser.add_argument(
        "--chat-template",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="prompts through the tokenizer's chat template when it has one (default: on)",
    )
    parser.add_argument("--system-prompt", help="a system turn before each prompt (needs a chat template)")
    parser.add_argument(
        "--exact", action="store_true", default=None, help="exactness mode: float64 targets, rows evaluated one by one"
    )
    parser.add_argument(
        "--passes-only",
        action="store_true",
        default=None,
        help="replay every arm's passes from one plain decode per prompt, decoding a sample for real "
        "(diffusion targets; docs/passes-only.md)",
    )
    parser.add_argument(
        "--replay-check",
        help="passes-only runs: prompts per worker unit decoded for real, shortest and longest first (default 4)",
    )
    parser.add_argument(
        "--ar-sampling",
        help="autoregressive arms: coupled (default; token-exact) or rejection "
        "(rejection sampling, lossless in distribution)",
    )
    parser.add_argument(
        "--device", help="auto (default: a worker's GPU when it has one, else its CPU), cpu, cuda, cuda:N"
    )
    parser.add_argument(
        "--dtype", help="auto (default: bf16 on a GPU, float32 on a CPU), bfloat16, float16, float32, float64"
    )
    parser.add_argument("--workers", help="Ray workers (default: as many as the GPUs hold, else one per CPU)")
    parser.add_argument(
        "--gpus-per-worker", help="GPUs each worker reserves on a GPU cluster (default 1; 0.5 shares one)"
    )
    parser.add_argument("--address", help="an existing Ray cluster (host:port or auto); default: local")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--transfer",
        action="store_true",
        help="print the transfer view: learned proposers against the best baseline and the oracle",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cluster.runner import run_suite
    from cluster.suite import build_suite, check_prompts_fit, check_storable, load_suite
    from harness.reports.html import write_report
    from harness.runs.files import run_digest
    from harness.runs.lm_eval import write_results_json
    from tasks.registry import check_scorers

    settings = load_suite(args.suite) if args.suite else {}
    suite = build_suite(
        settings,
        {
            "models": args.models,
            "proposers": args.proposers,
            "tasks": args.tasks,
            "split": args.split,
            "limit": args.limit,
            "temperatures": args.temperatures,
            "rules": args.rules,
            "budgets": args.budgets,
            "seeds": args.seeds,
            "batch_sizes": args.batch_size,
            "reference_checks": args.reference_checks,
            "gen_length": args.gen_length,
            "block_length": args.block_length,
            "untrained_block_length": args.untrained_block_length,
            "num_fewshot": args.fewshot,
            "exact": args.exact,
            "passes_only": args.passes_only,
            "replay_check": args.replay_check,
            "ar_sampling": args.ar_sampling,
            "mask_id": args.mask_id,
            "eos_id": args.eos_id,
            "chat_template": args.chat_template,
            "system_prompt": args.system_prompt,
            "workers": args.workers,
            "device": args.device,
            "dtype": args.dtype,
            "gpus_per_worker": args.gpus_per_worker,
        },
    )
    check_storable(suite)
    check_prompts_fit(suite)
    check_scorers(suite.tasks)  # a broken code sandbox would score every program wrong
    output = args.output or str(Path("runs") / (Path(args.suite).stem if args.suite else "default"))
    try:
        result = run_suite(suite, output, address=args.address, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\nspotbench: interrupted; run the same command again to resume {output}", file=sys.stderr)
        return 130
    report = write_report(result.run_dir)
    write_results_json(result.run_dir)
    print(
        f"run directory: {result.run_dir.path}  (groups written {result.written}, "
        f"already done {result.skipped}, workers {result.workers}"
        + ("" if result.first_group_s is None else f", first group written after {result.first_group_s:.1f} s")
        + f"); report: {report}"
    )
    print(render_summary(result.summary.to_pylist(), TRANSFER_COLUMNS if args.transfer else COLUMNS))
    if suite.passes_only:
        from harness.passes_only import replay_statement

        print(replay_statement(result.summary.to_pylist(), suite.exact))
    print(
        f"digest {run_digest(result.run_dir.path)}  (pins this run: spotbench verify prints it, "
        "spotbench gate --baseline-digest checks it)"
    )
    return 0


COLUMNS = [
    ("model", "{}"),
    ("task", "{}"),
    ("T", "{:g}"),
    ("rule", "{}"),
    ("proposer", "{}"),
    ("budget", "{}"),
    ("batch", "{}"),
    ("n", "{}"),
    ("exact", "{:.0%}"),
    ("accept", "{:.2f}"),
    ("speedup_nfe", "{:.2f}x"),
    ("95% interval", "{0[0]:.2f}-{0[1]:.2f}"),
    ("speedup_wall", "{:.2f}x"),
    ("wall 95%", "{0[0]:.2f}-{0[1]:.2f}"),
    ("robust", "{:.2f}x"),
    ("disturbed", "{}"),
    ("predicted", "{:.2f}x"),
    ("plain tok/s", "{:.1f}"),
    ("tok/s", "{:.1f}"),
    ("accuracy", "{:.1%}"),
]
TRANSFER_COLUMNS = [
    ("model", "{}"),
    ("task", "{}"),
    ("T", "{:g}"),
    ("rule", "{}"),
    ("budget", "{}"),
    ("proposer", "{}"),
    ("trained on", "{}"),
    ("n", "{}"),
    ("exact", "{:.0%}"),
    ("speedup_nfe", "{:.3f}x"),
    ("95% interval", "{0[0]:.2f}-{0[1]:.2f}"),
    ("vs best baseline", "{:.3f}"),
    ("95% interval ", "{0[0]:.3f}-{0[1]:.3f}"),
    ("best", "{}"),
    ("of oracle", "{:.2f}"),
    ("speedup_wall", "{:.2f}x"),
]
FIELDS = {
    "T": "temperature",
    "batch": "batch_size",
    "exact": "exact_rate",
    "accept": "mean_accept_len",
    "95% interval": "speedup_nfe_ci95",
    "tok/s": "spec_tokens_per_s",
    "plain tok/s": "plain_tokens_per_s",
    "predicted": "predicted_speedup_wall",
    "wall 95%": "speedup_wall_ci95",
    "robust": "speedup_wall_robust",
    "disturbed": "disturbed_rows",
    "trained on": "trained_on",
    "vs best baseline": "vs_best_baseline",
    "95% interval ": "vs_best_baseline_ci95",
    "best": "best_baseline",
    "of oracle": "oracle_fraction",
}


def render_summary(rows: list[dict], columns: list[tuple[str, str]] = COLUMNS) -> str:
    """The summary as an aligned text table (one line per arm; an `auto` budget shows as auto:CHOSEN, the
    budgets its workers chose)."""
    from harness.runs.schema import AUTO

    cells = [[name.strip() for name, _ in columns]]
    for row in sorted(rows, key=lambda r: [r[k] for k in ("model", "task", "temperature", "rule", "batch_size")]):
        chosen = ",".join(map(str, row["chosen_budgets"]))
        row = row | {"budget": f"auto:{chosen}" if row["budget"] == AUTO else row["budget"]}
        cells.append([_fmt(fmt, row[FIELDS.get(name, name)]) for name, fmt in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in cells)


def _fmt(fmt: str, value) -> str:
    return "-" if value is None else fmt.format(value)

"""`spotbench tasks list|check`: which tasks exist and whether their data is here; scorer self-checks.

`check` scores every reference answer of a task against itself (HumanEval canonical solutions, MBPP
reference code, GSM8K gold answers, MATH500 answer vs. the boxed answer of the solution, arith gold
answers) and exits 1 if a task has more failures than it allows: a scorer that rejects gold answers
is broken, whatever a model scores with it.
"""

from __future__ import annotations

import argparse
import json
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="list benchmark tasks, self-check their scorers")
    commands = parser.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    data_help = "folder with the benchmark files (default: $SPOTBENCH_DATA_DIR, else ../shared/data)"

    listing = commands.add_parser("list", help="tasks, their splits and where their data comes from")
    listing.add_argument("--data-dir", help=data_help)
    listing.add_argument("--json", action="store_true", help="one JSON object per line per task")
    listing.set_defaults(func=run_list)

    check = commands.add_parser("check", help="score each task's reference answers against itself")
    check.add_argument("tasks", nargs="*", metavar="TASK", help="tasks to check (default: all)")
    check.add_argument("--data-dir", help=data_help)
    check.add_argument("--limit", help="check only the first N samples of each task (N >= 1)")
    check.add_argument(
        "--json", action="store_true", help="one JSON object per line per task: task, checked, passed, failures"
    )
    check.set_defaults(func=run_check)


def run_list(args: argparse.Namespace) -> int:
    from tasks.registry import get_task, task_names

    for name in task_names():
        task = get_task(name)
        info = {"task": name, "splits": list(task.splits), "data": task.data_status(args.data_dir)}
        if args.json:
            print(json.dumps(info))
        else:
            print(f"{name:<10} {','.join(task.splits):<30} {info['data']}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from harness.validation import Count, check_value
    from tasks.registry import get_task, task_names

    limit = None if args.limit is None else check_value(Count, args.limit, "--limit")
    tasks = [get_task(name) for name in (args.tasks or task_names())]  # unknown names fail first
    all_ok = True
    for task in tasks:
        start = time.monotonic()
        result = task.self_check(args.data_dir, limit)
        seconds = round(time.monotonic() - start, 1)
        all_ok &= result.ok
        if args.json:
            print(
                json.dumps(
                    {
                        "task": result.task,
                        "checked": result.checked,
                        "passed": result.passed,
                        "failures": result.failures,
                        "allowed_failures": result.allowed_failures,
                        "ok": result.ok,
                        "seconds": seconds,
                    }
                ),
                flush=True,
            )
        else:
            failures = f"  failures: {' '.join(result.failures)}" if result.failures else ""
            verdict = "ok" if result.ok else "FAIL"
            print(
                f"{result.task:<10} {result.passed}/{result.checked} passed  {verdict}  ({seconds}s){failures}",
                flush=True,
            )
    return 0 if all_ok else 1

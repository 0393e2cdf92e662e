"""`results.json` in lm-evaluation-harness's shape, beside a run's Parquet files.

Dashboards and scripts that read lm-eval output (`results`, `configs`, `versions`, `n-shot`,
`higher_is_better`, `n-samples`, `config`) read a spotbench run through this file. It is written
from the run's summary, one lm-eval "task" per arm, named
`<task>|<model>|<proposer>|budget=<b>|T=<t>|<rule>` (lm-eval keys results by task; a spotbench arm is
the unit whose numbers belong together). Metrics carry lm-eval's `,<filter>` suffix (`none`):

- `exact_match` / `spec_exact_match`: the task score of the plain / speculative completions;
- `lossless`: the share of token-checked samples equal to plain decoding (`exact_rate`);
- `speedup_nfe`, `speedup_wall`, `mean_accept_len`: as in the summary (ratios of sums).

Stderrs follow lm-eval: for a share p over n samples the sample standard error sqrt(p(1-p)/(n-1));
for `speedup_nfe` the half-width of the summary's bootstrap 95% interval over 1.96; `N/A` where the
run measures none (wall time and acceptance are reported without one). The Parquet rows stay the
record; this file is a view of them.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from harness.runs.run_dir import RunDir
from harness.runs.schema import SCHEMA_VERSION

FILE = "results.json"
FILTER = "none"
HIGHER_IS_BETTER = {
    "exact_match": True,
    "spec_exact_match": True,
    "lossless": True,
    "speedup_nfe": True,
    "speedup_wall": True,
    "mean_accept_len": True,
}


def arm_name(row: dict[str, Any]) -> str:
    return (
        f"{row['task']}|{row['model']}|{row['proposer']}|budget={row['budget']}|T={row['temperature']:g}|{row['rule']}"
    )


def share_stderr(p: float | None, n: int) -> float | str:
    """lm-eval's `mean_stderr` of n values in {0, 1} with mean p (sample variance, ddof 1)."""
    if p is None or n < 2:
        return "N/A"
    return math.sqrt(p * (1 - p) / (n - 1))


def arm_metrics(row: dict[str, Any]) -> dict[str, Any]:
    low, high = row["speedup_nfe_ci95"]
    checked = row["n"] - row["distribution_n"]
    values = {
        "exact_match": (row["accuracy"], share_stderr(row["accuracy"], row["n"])),
        "spec_exact_match": (row["spec_accuracy"], share_stderr(row["spec_accuracy"], row["n"])),
        "lossless": (row["exact_rate"], share_stderr(row["exact_rate"], checked)),
        "speedup_nfe": (row["speedup_nfe"], (high - low) / (2 * 1.96)),
        "speedup_wall": (row["speedup_wall"], "N/A"),
        "mean_accept_len": (row["mean_accept_len"], "N/A"),
    }
    out: dict[str, Any] = {"alias": arm_name(row)}
    for metric, (value, stderr) in values.items():
        if value is not None:  # an unscored task has no exact_match; lm-eval omits what it did not compute
            out[f"{metric},{FILTER}"] = value
            out[f"{metric}_stderr,{FILTER}"] = stderr
    return out


def lm_eval_results(summary: list[dict[str, Any]], manifest: dict[str, Any]) -> dict[str, Any]:
    """The lm-eval-shaped results of a run (see the module docstring)."""
    config = manifest.get("config", {})
    arms = {arm_name(row): row for row in summary}
    return {
        "results": {name: arm_metrics(row) for name, row in arms.items()},
        "group_subtasks": {name: [] for name in arms},
        "configs": {
            name: {
                "task": name,
                "dataset_name": row["task"],
                "test_split": config.get("split"),
                "num_fewshot": config.get("num_fewshot"),
                "output_type": "generate_until",
                "generation_kwargs": {
                    "max_gen_toks": config.get("gen_length"),
                    "temperature": row["temperature"],
                    "block_length": config.get("block_length"),
                    "rule": row["rule"],
                },
                "metadata": {
                    "model": row["model"],
                    "proposer": row["proposer"],
                    "budget": row["budget"],
                    "proposer_kind": row["proposer_kind"],
                    "trained_on": row["trained_on"],
                },
            }
            for name, row in arms.items()
        },
        "versions": dict.fromkeys(arms, SCHEMA_VERSION),
        "n-shot": {name: config.get("num_fewshot") or 0 for name in arms},
        "higher_is_better": dict.fromkeys(arms, HIGHER_IS_BETTER),
        "n-samples": {name: {"original": row["n"], "effective": row["n"]} for name, row in arms.items()},
        "config": {
            "model": "spotbench",
            "model_args": config,
            "limit": config.get("limit"),
            "seeds": manifest.get("seeds"),
            "chat_template": config.get("chat_template"),
        },
        "git_hash": manifest.get("git_revision"),
        "date": time.time(),
        "packages": manifest.get("packages"),
    }


def write_results_json(run_dir: RunDir) -> Path:
    """Write `results.json` into a completed run directory from its summary and manifest."""
    data = lm_eval_results(run_dir.read_summary().to_pylist(), run_dir.manifest())
    path = run_dir.path / FILE
    temp = run_dir.path / f".tmp-{FILE}"
    temp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    temp.replace(path)
    return path

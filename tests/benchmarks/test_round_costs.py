"""The round-cost benchmark keeps running: a smoke run on a tiny target prints a row per arm and
batch size, with the three costs and the ratio to batch 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "round_costs.py"


@pytest.mark.slow
def test_a_smoke_run_prints_a_row_per_arm_and_batch_size() -> None:
    arguments = ["--targets", "tiny-random:sdar", "--proposers", "confidence", "--prompts", "3"]
    arguments += ["--batch-sizes", "1,2", "--temperatures", "0", "--reps", "1", "--gen-length", "16"]
    arguments += ["--block-length", "8"]
    result = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("tiny-random:sdar")]
    assert [(r[2], r[3]) for r in rows] == [("plain", "1"), ("plain", "2"), ("confidence", "1"), ("confidence", "2")]
    assert all(float(r[4]) > 0 and r[-1].endswith("x") for r in rows)

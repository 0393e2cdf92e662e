"""The batch-size benchmark keeps running: a smoke run on tiny targets, one diffusion and one
autoregressive, every speculative generation exact against plain decoding at its batch size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "batch_sizes.py"


@pytest.mark.slow
@pytest.mark.parametrize("target, proposer", [("tiny-random:sdar", "confidence"), ("tiny-random-ar", "prompt-lookup")])
def test_a_smoke_run_prints_a_row_per_batch_size_and_a_cost_curve(target, proposer) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--targets",
            target,
            "--proposers",
            proposer,
            "--prompts",
            "3",
            "--batch-sizes",
            "1,2",
            "--reps",
            "1",
            "--gen-length",
            "16",
            "--block-length",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rows = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"]) and "|" not in line]
    assert [r[0] for r in rows] == ["1", "2"] and all(r[-1] == "3/3" for r in rows), result.stdout
    assert sum("|" in line for line in lines) == 7  # the cost curve's header and rows

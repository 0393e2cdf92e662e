"""The device check script keeps running: a CPU smoke run (CI has no GPU; the script's GPU run is
recorded in docs/devices.md when a GPU is available)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_check.py"


@pytest.mark.slow
def test_a_cpu_smoke_run_prints_a_row_per_mode_and_proposer() -> None:
    """Diffusion and autoregressive targets, each with its own proposers and rule, and the noise line."""
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--targets",
            "sdar-a,ar-a",
            "--limit",
            "1",
            "--budgets",
            "2",
            "--temperatures",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("noise on cpu: uniforms equal numpy's bit for bit: True") for line in lines)
    for target, proposers in [
        ("sdar-a", ("confidence", "spot")),
        ("ar-a", ("draft-model:ar-a-draft", "prompt-lookup")),
    ]:
        rows = [line.split() for line in lines if line.startswith(target + " ")]
        assert {(r[1], r[3]) for r in rows} == {(m, p) for m in ("bf16", "exact") for p in proposers}
        assert all(r[5] == "100%" for r in rows if r[1] == "exact")


@pytest.mark.slow
def test_without_a_gpu_the_default_run_is_refused_with_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--device cpu" in result.stderr

"""The project's own `evaluate` metric modules, loaded by local path (the hub is not needed).

Each metric is a folder `<name>/<name>.py` defining an `evaluate.Metric`; the logic they share with
the rest of the project (answer extraction, the sandbox, math equivalence) lives in `tasks`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

METRICS_DIR = Path(__file__).resolve().parent


@cache
def load(name: str) -> Any:
    """`evaluate.load` of `tasks/metrics/<name>`, once per process."""
    import evaluate

    path = METRICS_DIR / name
    if not (path / f"{name}.py").is_file():
        raise KeyError(f"no metric module {name!r} in {METRICS_DIR}")
    return evaluate.load(str(path))


def score_programs(programs: list[str], tests: list[str], timeout_s: float) -> list[dict[str, Any]]:
    """pass@1 by execution in the sandbox (MBPP and HumanEval): one result dict per program."""
    out = load("code_pass_at_1").compute(predictions=programs, references=tests, timeout_s=timeout_s)
    return [
        {"correct": ok, "status": status, "stderr": err}
        for ok, status, err in zip(out["passed"], out["status"], out["stderr"])
    ]

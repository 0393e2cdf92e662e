"""map_in_order: Ray task results in submission order, shared arguments passed once."""

from __future__ import annotations

import time

import pytest

from cluster.ordered import map_in_order

pytestmark = pytest.mark.slow  # Ray clusters and processes: CI runs it, the fast lane skips it


def slow_first(job: int, offset: int) -> tuple[int, int]:
    """Early jobs finish last, so a gather in completion order would come back reversed."""
    time.sleep(0.3 * (3 - job) if job < 3 else 0)
    return job, job + offset


def test_results_come_back_in_job_order_whatever_finishes_first():
    assert list(map_in_order(slow_first, list(range(6)), (10,), workers=3)) == [(j, j + 10) for j in range(6)]

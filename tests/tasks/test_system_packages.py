"""The suite checks the system packages its selected tests need before it runs any (tests/conftest.py):
where one is missing, the run stops with one line naming the install command and exits non-zero, so CI
fails there instead of failing each test that needs it with the same traceback. Each test runs pytest
in a fresh interpreter whose PATH holds only the commands it is given."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "apt-get install -y chromium bubblewrap libseccomp2"
NEEDS_BWRAP = "tests/tasks/test_registry.py"  # any test of tasks/ (fast, and needs nothing else)
NEEDS_CHROMIUM = "tests/harness/reports/test_html.py::test_headless_chromium_renders_the_report_without_console_errors"
NEEDS_NEITHER = "tests/harness/test_validation.py"

pytestmark = pytest.mark.slow  # each test starts pytest in a subprocess


def pytest_with(
    commands: list[str], tests: list[str], tmp_path: Path, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """pytest on `tests` (with `options`), with PATH a directory of links to `commands` only."""
    path = tmp_path / "bin"
    path.mkdir(parents=True)
    for command in commands:
        found = shutil.which(command)
        assert found is not None, f"{command} is needed to run this test"
        (path / command).symlink_to(found)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, *tests],
        cwd=ROOT,
        env={**os.environ, "PATH": str(path)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def stop_line(done: subprocess.CompletedProcess) -> str:
    """The one line of a stopped run that names the install command; no test ran, none failed."""
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if INSTALL in line]
    assert done.returncode != 0 and len(lines) == 1, output
    assert "no tests ran" in output and "Traceback" not in output, output
    return lines[0]


@pytest.mark.parametrize("options", [(), ("-n", "2")], ids=["one process", "pytest -n 2"])
def test_a_missing_bubblewrap_stops_the_run_with_one_line(options, tmp_path):
    line = stop_line(pytest_with([], [NEEDS_BWRAP], tmp_path, options))
    assert "need bubblewrap," in line


def test_a_missing_chromium_stops_a_run_that_renders_the_report(tmp_path):
    line = stop_line(pytest_with(["bwrap"], [NEEDS_BWRAP, NEEDS_CHROMIUM], tmp_path))
    assert "need chromium," in line


def test_control_only_the_packages_of_the_selected_tests_are_needed(tmp_path):
    with_bwrap = pytest_with(["bwrap"], [NEEDS_BWRAP], tmp_path / "bwrap")  # no chromium on PATH
    assert with_bwrap.returncode == 0, with_bwrap.stdout + with_bwrap.stderr
    neither = pytest_with([], [NEEDS_NEITHER], tmp_path / "neither")
    assert neither.returncode == 0, neither.stdout + neither.stderr

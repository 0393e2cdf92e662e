import dataclasses
import re
import shutil
import subprocess

import pytest

from cluster.evaluate import Evaluator, Unit
from cluster.suite import Suite
from harness.results import RunDir, group_id
from spotbench.cli import main
from tasks.registry import get_task

SUITE = Suite(
    models=("tiny-random:sdar",),
    proposers=("confidence", "oracle"),
    limit=2,
    temperatures=(0.0, 1.0),
    budgets=(0, 2, 4),
    gen_length=16,
    block_length=8,
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> RunDir:
    run = RunDir.open(tmp_path_factory.mktemp("report") / "run", SUITE.config(), [0], split_sizes={"arith": 2})
    evaluator = Evaluator(SUITE)
    for sample in get_task("arith").load("test", limit=2):
        for rows in evaluator.evaluate(Unit(SUITE.models[0], "arith", (sample,), SUITE.groups())):
            assert group_id(dataclasses.asdict(rows[0])) and run.write_group(rows)
    run.write_summary()
    run.update_manifest(status="complete", sessions=[{"loads": evaluator.loads}])
    return run


def test_the_report_is_one_self_contained_page_with_every_plot(run_dir, capsys) -> None:
    assert main(["report", str(run_dir.path)]) == 0
    page = (run_dir.path / "report.html").read_text()
    assert capsys.readouterr().out.strip().endswith("report.html")
    assert not re.search(r"""(src|href)\s*=|url\(|https?://|<link|<script""", page)
    for title in (
        "Speedup vs budget",
        "Transitions committed per pass",
        "Target passes per generated token",
        "Exactness",
        "Accuracy of the plain reference",
        "Accuracy",
    ):
        assert title in page
    # speedup: one panel per temperature; histograms: per panel and proposer; passes per token and
    # accuracy: one per (model, task)
    assert page.count("<svg") == 2 + 4 + 1 + 1
    assert page.count("<path") == 2  # the accuracy bars' Wilson intervals (T=0, T=1)
    assert page.count("<polyline") == 2 * 2 * 2  # per panel: nfe and wall line per proposer
    assert "tiny-random:sdar/arith T=1 top1 batch 8 oracle@4" in page
    assert "Model loads per worker" in page and "<td>tiny-random:sdar</td><td>cpu</td><td>float32</td>" in page
    assert page.count("p99 s</th>") == 2 and re.search(r"<td>\d+\.\d\d / \d+\.\d\d / \d+\.\d\d</td>", page)


def test_report_needs_a_run_directory(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def chromium(page, tmp_path) -> tuple[str, bytes]:
    """Render `page` headless; returns (console lines, screenshot PNG)."""
    shot = tmp_path / "shot.png"
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,1600",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    console = "\n".join(line for line in result.stderr.splitlines() if ":CONSOLE" in line)
    return console, shot.read_bytes() if shot.exists() else b""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_headless_chromium_renders_the_report_without_console_errors(run_dir, tmp_path) -> None:
    main(["report", str(run_dir.path)])
    console, png = chromium(run_dir.path / "report.html", tmp_path)
    assert console == ""
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
    # negative control: the console check sees a script error
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>notDefined()</script></body></html>")
    console, _ = chromium(bad, tmp_path)
    assert "Uncaught ReferenceError" in console

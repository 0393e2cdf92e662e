import dataclasses
import re
import shutil
import subprocess

import pytest

from cluster.suite import Suite
from cluster.unit_decoder import Unit, UnitDecoder
from harness.reports.html import render_report
from harness.runs.run_dir import RunDir
from harness.runs.schema import Row, group_id
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
    unit_decoder = UnitDecoder(SUITE)
    for sample in get_task("arith").load("test", limit=2):
        for rows in unit_decoder.decode(Unit(SUITE.models[0], "arith", (sample,), tuple(SUITE.groups()))):
            assert group_id(dataclasses.asdict(rows[0])) and run.write_group(rows)
    run.write_summary()
    run.update_manifest(status="complete", sessions=[{"loads": unit_decoder.loads}])
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
    assert page.count("p99 s</th>") == 2
    assert re.search(r"<td>\d+\.\d\d / \d+\.\d\d / \d+\.\d\d \(p50 \d+\.\d\d-\d+\.\d\d\)</td>", page)
    # wall figures say how sure they are: intervals over prompts and the rows left out (none here)
    assert re.search(r"\d\.\d\dx \(\d+\.\d\d-\d+\.\d\d\); robust \d\.\d\dx, 0 of 2 disturbed", page)
    assert "none: every row's pass cost is within 3x of its arm's median" in page


def test_a_disturbed_row_is_counted_listed_and_left_out_of_the_wall_line(run_dir, tmp_path) -> None:
    """Each prompt of the run twice (4 per arm) with a pass cost of 2 everywhere, and one row of
    confidence@4 at T=0 slowed 10x: the report counts it, lists it and draws the wall speedup without it."""
    steady = [
        r
        | {
            "sample_id": f"{r['sample_id']}{copy}",
            "plain_wall_s": 0.01 * r["plain_target_forwards"],
            "spec_wall_s": 0.02 * r["spec_target_forwards"],
        }
        for r in run_dir.read_rows().to_pylist()
        for copy in ("", "-again")
    ]
    slow = next(
        i for i, r in enumerate(steady) if (r["proposer"], r["budget"], r["temperature"]) == ("confidence", 4, 0.0)
    )
    steady[slow] = steady[slow] | {"spec_wall_s": steady[slow]["spec_wall_s"] * 10}
    run = RunDir.open(tmp_path / "run", SUITE.config() | {"limit": 4}, [0], split_sizes={"arith": 4})
    groups: dict[str, list] = {}
    for row in steady:
        groups.setdefault(group_id(row), []).append(row)
    for group in groups.values():
        run.write_group([Row(**r) for r in group])
    summary = {(r["proposer"], r["budget"], r["temperature"]): r for r in run.write_summary().to_pylist()}
    run.update_manifest(status="complete")
    page = render_report(run)
    arm = summary["confidence", 4, 0.0]
    kept = [r for i, r in enumerate(steady) if i != slow and r["proposer"] == "confidence" and r["budget"] == 4]
    kept = [r for r in kept if r["temperature"] == 0.0]
    expected = sum(r["plain_target_forwards"] for r in kept) / sum(2 * r["spec_target_forwards"] for r in kept)
    assert arm["disturbed_rows"] == 1 and arm["speedup_wall_robust"] == pytest.approx(expected)
    assert "1 of 4 disturbed" in page and page.count("0 of 4 disturbed") == len(summary) - 1
    assert f"<td>{steady[slow]['sample_id']}</td><td>0</td>" in page and "<td>20.00</td><td>2.00</td>" in page
    # the dashed line is the robust figure: its point for confidence@4 at T=0, not the raw one's
    assert f"4: {arm['speedup_wall_robust']:.3f}x" in page and f"4: {arm['speedup_wall']:.3f}x" not in page


def test_report_needs_a_run_directory(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def chromium(page, tmp_path) -> tuple[str, bytes]:
    """Render `page` headless; returns (console lines, screenshot PNG)."""
    assert CHROMIUM is not None  # the tests that call this skip without it
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

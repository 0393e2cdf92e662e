"""results.json: lm-eval's shape, read back by lm-eval's own table writer, and every number checked
against the run's Parquet rows (computed here independently of the summary)."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from cluster.unit_decoder import UnitDecoder, Unit
from cluster.suite import Suite
from harness.runs.lm_eval import FILE, write_results_json
from harness.runs.run_dir import RunDir
from spotbench.cli import main
from tasks.registry import get_task

SUITE = Suite(
    models=("tiny-random:sdar",),
    proposers=("confidence", "oracle"),
    limit=2,
    temperatures=(0.0, 1.0),
    budgets=(4,),
    gen_length=16,
    block_length=8,
)


pytestmark = pytest.mark.slow  # a run's worth of decoding (seconds each on a loaded machine)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> RunDir:
    run = RunDir.open(
        tmp_path_factory.mktemp("lm_eval") / "run", SUITE.config(), [0], split_sizes={"arith": SUITE.limit}
    )
    unit_decoder = UnitDecoder(SUITE)
    for sample in get_task("arith").load("test", limit=SUITE.limit):
        for rows in unit_decoder.decode(Unit(SUITE.models[0], "arith", (sample,), tuple(SUITE.groups()))):
            run.write_group(rows)
    run.write_summary()
    run.end_session("complete")
    return run


def stderr(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values))


def test_results_json_matches_the_parquet_rows(run) -> None:
    data = json.loads(write_results_json(run).read_text())
    rows = defaultdict(list)
    for row in run.read_rows().to_pylist():
        rows[f"arith|tiny-random:sdar|{row['proposer']}|budget=4|T={row['temperature']:g}|top1"].append(row)
    assert set(data["results"]) == set(rows) and len(rows) == 4
    for name, members in rows.items():
        result, n = data["results"][name], len(members)
        correct = [float(r["correct"]) for r in members]
        exact = [float(r["exact"]) for r in members]
        assert result["exact_match,none"] == pytest.approx(statistics.mean(correct))
        assert result["exact_match_stderr,none"] == pytest.approx(stderr(correct))
        assert result["lossless,none"] == 1.0 == statistics.mean(exact)
        assert result["lossless_stderr,none"] == 0.0
        speedup = sum(r["plain_target_forwards"] for r in members) / sum(r["spec_target_forwards"] for r in members)
        assert result["speedup_nfe,none"] == pytest.approx(speedup) and result["speedup_wall_stderr,none"] == "N/A"
        assert data["n-samples"][name] == {"original": n, "effective": n} == {"original": 2, "effective": 2}
        assert data["configs"][name]["generation_kwargs"]["max_gen_toks"] == 16
        assert data["configs"][name]["metadata"]["proposer"] == members[0]["proposer"]
    assert data["config"]["model_args"] == SUITE.config() and data["config"]["chat_template"] is None
    assert data["git_hash"] == run.manifest()["git_revision"]


def test_lm_eval_reads_it(run) -> None:
    """lm-eval's own results table (what `lm_eval` prints) renders every arm and metric of the file."""
    from lm_eval.utils import make_table

    data = json.loads(write_results_json(run).read_text())
    table = make_table(data)
    name = "arith|tiny-random:sdar|oracle|budget=4|T=0|top1"
    assert name.replace("|", "\\|") in table and "speedup_nfe" in table and "lossless" in table  # markdown escapes |
    assert f"{data['results'][name]['speedup_nfe,none']:.4f}" in table


def test_spotbench_run_writes_results_json(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--models",
                "tiny-random:sdar",
                "--proposers",
                "confidence",
                "--budgets",
                "4",
                "--limit",
                "2",
                "--temperatures",
                "0",
                "--gen-length",
                "16",
                "--block-length",
                "8",
                "--workers",
                "1",
                "--no-progress",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / FILE).read_text())
    [arm] = pq.read_table(out / "summary.parquet").to_pylist()
    [result] = data["results"].values()
    assert result["speedup_nfe,none"] == arm["speedup_nfe"] and data["n-samples"][result["alias"]]["effective"] == 2

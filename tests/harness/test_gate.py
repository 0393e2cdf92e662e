import dataclasses
import json
import shutil

import pyarrow.parquet as pq
import pytest

from cluster.suite import Suite
from cluster.unit_decoder import Unit, UnitDecoder
from harness.gate import Check, Thresholds, gate, render, wilson_interval
from harness.runs.run_dir import RunDir
from harness.runs.schema import SCHEMA_VERSION, SUMMARY_METADATA, Row, group_id
from spotbench.cli import main
from tasks.registry import get_task

SUITE = Suite(
    models=("tiny-random:sdar",),
    proposers=("confidence",),
    limit=4,
    temperatures=(0.0,),
    budgets=(4,),
    gen_length=16,
    block_length=8,
)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    unit_decoder = UnitDecoder(SUITE)
    samples = get_task("arith").load("test", limit=4)
    return [
        dataclasses.asdict(r)
        for s in samples
        for g in unit_decoder.decode(Unit(SUITE.models[0], "arith", (s,), tuple(SUITE.groups())))
        for r in g
    ]


CONFIG = SUITE.config()


def write_run(path, rows, status="complete", config=CONFIG) -> str:
    """A run directory of `rows` under `config` (each prompt of the arith split it holds, as a run of
    `config` on a 4-prompt split would)."""
    run = RunDir.open(path, config, [0], split_sizes={"arith": len({r["sample_id"] for r in rows})})
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(group_id(row), []).append(row)
    for group in groups.values():
        run.write_group([Row(**r) for r in group])
    run.write_summary()
    run.update_manifest(status=status)
    return str(path)


def test_wilson_interval_matches_known_values() -> None:
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0


def test_a_run_equal_to_its_baseline_passes(tmp_path, rows, capsys) -> None:
    base = write_run(tmp_path / "base", [r | {"correct": True} for r in rows])
    run = write_run(tmp_path / "run", [r | {"correct": True} for r in rows])
    assert main(["gate", run, "--baseline", base]) == 0
    assert "gate: PASS: 0 of 5 checks failed" in capsys.readouterr().out
    assert main(["gate", run, "--baseline", f"{base}/summary.parquet"]) == 0


def test_a_regressed_run_fails_with_a_table(tmp_path, rows, capsys) -> None:
    base = write_run(tmp_path / "base", [r | {"correct": True} for r in rows])
    bad = [
        r
        | {
            "correct": False,
            "spec_nfe": r["spec_nfe"] * 2,
            "spec_target_forwards": r["spec_target_forwards"] * 2,
            "spec_wall_s": r["spec_wall_s"] * 4,
        }
        for r in rows
    ]
    bad[0] |= {"exact": False, "verdict": "logic-error"}
    run = write_run(tmp_path / "run", bad)
    assert main(["gate", run, "--baseline", base]) == 1
    out = capsys.readouterr().out
    for metric in ("exact_rate", "mean_accept_len", "speedup_nfe", "speedup_wall_robust", "accuracy"):
        assert any(
            line.split()[4] == metric and line.endswith("FAIL") for line in out.splitlines() if len(line.split()) > 5
        ), metric
    assert "gate: FAIL: 5 of 5 checks failed" in out


def test_a_small_accuracy_drop_within_the_wilson_bound_passes(rows) -> None:
    base = {
        "model": "m",
        "proposer": "p",
        "task": "t",
        "temperature": 0.0,
        "rule": "top1",
        "budget": 4,
        "batch_size": 1,
        "n": 20,
        "correct": 10,
        "accuracy": 0.5,
        "exact_rate": 1.0,
        "mean_accept_len": 2.0,
        "speedup_nfe": 2.0,
        "speedup_wall": 1.5,
        "speedup_wall_robust": 1.5,
        "disturbed_rows": 0,
    }
    ok = gate([base | {"accuracy": 0.35}], [base], "complete")
    assert all(c.ok for c in ok)
    low = gate([base | {"accuracy": 0.25}], [base], "complete")
    assert [c.metric for c in low if not c.ok] == ["accuracy"]
    faster = gate([base | {"speedup_nfe": 2.5}], [base], "complete", Thresholds(nfe_band=0.05))
    assert [c.metric for c in faster if not c.ok] == ["speedup_nfe"]
    missing = gate([], [base], "running")
    assert {c.metric for c in missing if not c.ok} == {"status", "present"}
    assert "FAIL" in render([Check("a", "m", 1.0, 2.0, ">= 1.9", False)])


def test_bad_paths_are_exit_2(tmp_path, capsys) -> None:
    assert main(["gate", str(tmp_path), "--baseline", str(tmp_path)]) == 2
    assert "neither a run directory nor a summary" in capsys.readouterr().err


def test_runs_of_other_settings_are_refused_unless_allowed(tmp_path, rows, capsys) -> None:
    base = write_run(tmp_path / "base", rows)
    other = SUITE.config() | {"limit": 5, "seeds": [0, 1]}
    run = write_run(tmp_path / "run", rows + [r | {"seed": 1} for r in rows], config=other)
    assert main(["gate", run, "--baseline", base]) == 2
    err = capsys.readouterr().err.strip()
    assert "differ in settings that change results: limit (5 vs 4), seeds ([0, 1] vs [0])" in err
    assert "--allow-config-diff" in err and "\n" not in err
    assert main(["gate", run, "--baseline", f"{base}/summary.parquet"]) == 2  # the bare summary carries its config
    capsys.readouterr()
    assert main(["gate", run, "--baseline", base, "--allow-config-diff"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("spotbench: warning: ") and "gate: PASS" in captured.out
    # arms are matched by key: another budget list is a missing arm, not a refusal
    more = write_run(
        tmp_path / "more", rows + [r | {"budget": 8} for r in rows], config=SUITE.config() | {"budgets": [4, 8]}
    )
    assert main(["gate", more, "--baseline", base]) == 0


def test_the_status_of_a_run_counts_through_its_summary_file(tmp_path, rows, capsys) -> None:
    base = write_run(tmp_path / "base", rows)
    failed = write_run(tmp_path / "failed", rows, status="failed")
    assert main(["gate", f"{failed}/summary.parquet", "--baseline", base]) == 1
    assert any(line.split()[1] == "status" for line in capsys.readouterr().out.splitlines()[1:-1])
    # a copy of the same file outside its run is judged by the status written into it
    copy = tmp_path / "copy.parquet"
    shutil.copy(f"{base}/summary.parquet", copy)
    assert main(["gate", str(copy), "--baseline", base]) == 0


def test_a_summary_without_run_metadata_and_a_damaged_run_are_refused(tmp_path, rows, capsys) -> None:
    base = write_run(tmp_path / "base", rows)
    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(f"{base}/summary.parquet").replace_schema_metadata(None), bare)
    assert main(["gate", base, "--baseline", str(bare)]) == 2
    assert "carries no spotbench run metadata" in capsys.readouterr().err
    next((tmp_path / "base" / "samples").glob("*.parquet")).unlink()
    assert main(["gate", base, "--baseline", base]) == 2
    assert "is damaged: samples/" in capsys.readouterr().err


def steady(rows: list[dict]) -> list[dict]:
    """`rows` with set walls: 10 ms per plain pass, 20 ms per speculative one (a pass cost of 2)."""
    return [
        r | {"plain_wall_s": 0.01 * r["plain_target_forwards"], "spec_wall_s": 0.02 * r["spec_target_forwards"]}
        for r in rows
    ]


def test_a_row_another_process_slowed_fails_the_raw_wall_ratio_but_not_the_gate(tmp_path, rows, capsys) -> None:
    base = write_run(tmp_path / "base", steady(rows))
    slowed = steady(rows)
    slowed[1] = slowed[1] | {"spec_wall_s": slowed[1]["spec_wall_s"] * 10}
    run = write_run(tmp_path / "run", slowed)
    assert main(["gate", run, "--baseline", base, "--all"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if " speedup_wall_robust " in line]
    assert "(1 of 4 rows disturbed, left out)" in line and line.endswith("ok")
    # the control: the raw ratio of sums, which this row moves far outside the band
    ran, baseline = RunDir(tmp_path / "run").read_summary(), RunDir(tmp_path / "base").read_summary()
    raw, base_raw = ran.column("speedup_wall")[0].as_py(), baseline.column("speedup_wall")[0].as_py()
    assert not 0.5 * base_raw <= raw <= 1.5 * base_raw


def test_an_arm_with_no_undisturbed_row_fails_the_wall_check() -> None:
    base = {
        "model": "m",
        "proposer": "p",
        "task": "t",
        "temperature": 0.0,
        "rule": "top1",
        "budget": 4,
        "batch_size": 1,
        "n": 3,
        "correct": None,
        "accuracy": None,
        "exact_rate": 1.0,
        "mean_accept_len": 2.0,
        "speedup_nfe": 2.0,
        "speedup_wall": 1.5,
        "speedup_wall_robust": 1.5,
        "disturbed_rows": 0,
    }
    [wall] = [
        c
        for c in gate([base | {"speedup_wall_robust": None, "disturbed_rows": 3}], [base], "complete")
        if c.metric == "speedup_wall_robust"
    ]
    assert not wall.ok and wall.allowed.endswith("(3 of 3 rows disturbed, left out)")


def test_a_baseline_of_an_older_schema_version_is_refused_in_one_line(tmp_path, rows, capsys) -> None:
    """Its summary lacks this version's columns (the robust wall speedup the gate compares): a bare
    summary.parquet is refused by the version in its metadata, a run directory by its manifest's."""
    base, run = write_run(tmp_path / "base", rows), write_run(tmp_path / "run", rows)
    old = tmp_path / "old.parquet"
    table = pq.read_table(f"{base}/summary.parquet")
    record = json.loads(table.schema.metadata[SUMMARY_METADATA]) | {"schema_version": SCHEMA_VERSION - 1}
    pq.write_table(table.replace_schema_metadata({SUMMARY_METADATA: json.dumps(record).encode()}), old)
    assert main(["gate", run, "--baseline", str(old)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"is a summary of schema version {SCHEMA_VERSION - 1}; this spotbench reads version" in err
    assert "\n" not in err
    manifest = json.loads((tmp_path / "base" / "manifest.json").read_text())
    (tmp_path / "base" / "manifest.json").write_text(json.dumps(manifest | {"schema_version": SCHEMA_VERSION - 1}))
    assert main(["gate", run, "--baseline", base]) == 2
    err = capsys.readouterr().err.strip()
    assert f"holds results of schema version {SCHEMA_VERSION - 1}; this spotbench reads" in err and "\n" not in err


def test_a_wall_band_over_replayed_rows_is_refused_and_without_one_wall_goes_unchecked() -> None:
    from harness.errors import UserError
    from harness.gate import Summary, wall_band_for

    def side(replayed: int, source: str) -> Summary:
        return Summary([{"replayed_rows": replayed}], "complete", {}, source)

    full, passes = side(0, "full"), side(3, "passes")
    assert wall_band_for(full, full, None) == Thresholds().wall_band and wall_band_for(full, full, 0.2) == 0.2
    assert wall_band_for(passes, full, None) is None and wall_band_for(full, passes, None) is None
    for run, baseline in ((passes, full), (full, passes)):
        with pytest.raises(UserError, match="--wall-band gates wall time and passes is a passes-only run"):
            wall_band_for(run, baseline, 0.5)
    base = {
        "model": "m", "proposer": "p", "task": "t", "temperature": 0.0, "rule": "top1", "budget": 2,
        "batch_size": 1, "exact_rate": 1.0, "mean_accept_len": 2.0, "speedup_nfe": 2.0,
        "speedup_wall_robust": 1.5, "disturbed_rows": 0, "n": 4, "correct": None, "accuracy": None,
    }  # fmt: skip
    slower = base | {"speedup_wall_robust": 0.1}
    assert not all(c.ok for c in gate([slower], [base], "complete", Thresholds()))
    unchecked = gate([slower], [base], "complete", Thresholds(wall_band=None))
    assert all(c.ok for c in unchecked) and "speedup_wall_robust" not in {c.metric for c in unchecked}

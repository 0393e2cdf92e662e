import dataclasses
import hashlib
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.unit_decoder import UnitDecoder, Unit
from cluster.suite import Suite
from harness.bootstrap import interval
from harness.errors import UserError
from harness.runs.configs import compare
from harness.runs.files import sha256_file
from harness.runs.run_dir import RunDir
from harness.runs.schema import ROW_SCHEMA, SCHEMA_VERSION, SUMMARY_METADATA, Row, group_id, part_name
from harness.runs.summary import _joint_draws, summarize
from tasks.registry import get_task

SUITE = Suite(
    models=("tiny-random:sdar",),
    proposers=("confidence", "oracle"),
    limit=2,
    temperatures=(0.0,),
    budgets=(0, 4),
    gen_length=16,
    block_length=8,
)


@pytest.fixture(scope="module")
def groups() -> list[list[Row]]:
    """Real rows: two prompts of a tiny target through the worker's evaluation."""
    unit_decoder = UnitDecoder(SUITE)
    samples = get_task("arith").load("test", limit=2)
    return [
        rows
        for s in samples
        for rows in unit_decoder.decode(Unit(SUITE.models[0], "arith", (s,), tuple(SUITE.groups())))
    ]


def test_rows_match_the_schema_and_carry_both_arms(groups) -> None:
    assert len(groups) == 2 and all(len(rows) == 4 for rows in groups)
    row = dataclasses.asdict(groups[0][1])
    assert list(row) == ROW_SCHEMA.names
    assert (row["proposer"], row["budget"]) == ("confidence", 4)
    assert (
        row["speedup_nfe"]
        == row["plain_nfe"] / row["spec_nfe"]
        == row["plain_target_forwards"] / row["spec_target_forwards"]
    )
    assert (row["ar_sampling"], row["spec_draft_model_forwards"]) == ("coupled", 0)
    assert row["exact"] and row["verdict"] == "exact" and row["divergence_step"] is None
    assert (row["proposer_kind"], row["trained_on"]) == ("baseline", None)
    budget0 = groups[0][0]
    assert budget0.spec_nfe == budget0.plain_nfe and budget0.mean_accept_len == 1.0
    assert budget0.stops_no_draft == budget0.spec_nfe
    oracle = groups[0][3]
    assert oracle.proposer_kind == "oracle" and oracle.mean_accept_len >= row["mean_accept_len"]
    assert oracle.stops_leaf + oracle.stops_position + oracle.stops_token + oracle.stops_no_draft == oracle.spec_nfe


def test_rows_carry_the_prompt_the_gold_answer_and_the_generated_ids(groups) -> None:
    sample = get_task("arith").load("test", limit=1)[0]
    row = groups[0][1]
    assert sample.question in row.prompt and row.reference == sample.reference
    assert len(row.plain_answer_ids) == row.plain_tokens and len(row.spec_answer_ids) == row.spec_tokens
    assert row.spec_answer_ids == row.plain_answer_ids  # an exact arm generates the reference's ids
    assert all(isinstance(i, int) for i in row.plain_answer_ids)


def test_groups_are_written_once_atomically_with_a_recorded_digest(tmp_path, groups) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    assert run.write_group(groups[0]) is True
    arms = [(r.proposer, r.budget) for r in groups[0]]
    path = run.samples_dir / part_name(group_id(dataclasses.asdict(groups[0][0])), arms)
    before = path.stat().st_mtime_ns
    assert run.write_group(groups[0]) is False
    assert path.stat().st_mtime_ns == before
    table = pq.read_table(path)
    assert table.schema.metadata[b"spotbench_schema_version"] == str(SCHEMA_VERSION).encode()
    assert table.num_rows == 4 and not list(run.samples_dir.glob(".tmp-*"))
    [entry] = [json.loads(line) for line in (run.path / "index.jsonl").read_text().splitlines()]
    assert entry["file"] == path.name and entry["rows"] == 4 and entry["sha256"] == sha256_file(path)
    assert sorted(map(tuple, entry["arms"])) == sorted(arms)
    with pytest.raises(ValueError, match="one group"):
        run.write_group(groups[0] + groups[1])
    with pytest.raises(ValueError, match="arm appears twice"):
        run.write_group(groups[1] + groups[1][:1])


def test_group_id_and_file_names_are_fixed_functions_of_the_key() -> None:
    key = {
        "model": "m",
        "task": "t",
        "sample_id": "test/0",
        "temperature": 0.0,
        "rule": "top1",
        "seed": 0,
        "batch_size": 8,
    }
    assert group_id(key) == group_id(dict(reversed(list(key.items()))))
    assert group_id(key) != group_id(key | {"seed": 1}) != group_id(key | {"batch_size": 1})
    # the name format is part of the schema: changing it would orphan every existing run directory
    assert group_id(key) == hashlib.sha256(b'["m","t","test/0",0.0,"top1",0,8]').hexdigest()[:20]
    arms_hash = hashlib.sha256(b'[["a",2],["b",4]]').hexdigest()[:8]
    assert part_name("g", [("b", 4), ("a", 2)]) == f"g-{arms_hash}.parquet" == part_name("g", [("a", 2), ("b", 4)])


def test_config_changes_that_extend_and_that_refuse() -> None:
    old = SUITE.config()
    grown = compare(
        old, old | {"budgets": [0, 4, 8], "limit": 5, "seeds": [0, 1], "proposers": ["oracle", "confidence"]}
    )
    assert set(grown.extended) == {"budgets", "limit", "seeds", "proposers"} and not grown.refused
    for setting, value in (
        ("gen_length", 32),
        ("block_length", 16),
        ("exact", True),
        ("split", "train"),
        ("limit", 1),
        ("budgets", [4]),
        ("num_fewshot", 2),
    ):
        assert set(compare(old, old | {setting: value}).refused) == {setting}, setting
    assert set(compare(old, old | {"new_setting": 1}).refused) == {"new_setting"}  # unknown: refused
    assert not compare(old, dict(old)).extended and not compare(old, dict(old)).refused


def test_reopening_resumes_extends_and_refuses(tmp_path, groups) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    run.write_group(groups[0])
    (run.samples_dir / ".tmp-left-by-a-killed-driver").write_text("x")
    again = RunDir.open(tmp_path / "run", SUITE.config(), [0], command=["spotbench", "run"])
    assert set(again.verify().done_arms()) == {group_id(dataclasses.asdict(groups[0][0]))}
    assert not list(run.samples_dir.glob(".tmp-*"))
    bigger = Suite(**{**SUITE.__dict__, "limit": 3, "budgets": (0, 4, 8)}).config()
    RunDir.open(tmp_path / "run", bigger, [0])
    manifest = run.manifest()
    assert manifest["config"] == bigger and len(manifest["sessions"]) == 3
    assert manifest["config_history"][0]["changes"] == {"budgets": [[0, 4], [0, 4, 8]], "limit": [2, 3]}
    assert manifest["sessions"][1]["command"] == ["spotbench", "run"] and manifest["sessions"][2]["extended"]
    for change, named in (
        ({"limit": 2}, "limit 3 -> 2"),
        ({"gen_length": 32}, "gen_length 16 -> 32"),
        ({"budgets": [0, 4]}, "budgets [0, 4, 8] -> [0, 4]"),
    ):
        with pytest.raises(UserError, match=f"different config .*{re.escape(named)}"):
            RunDir.open(tmp_path / "run", bigger | change, [0])
    assert run.manifest() == manifest  # a refusal writes nothing
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file").write_text("x")
    with pytest.raises(UserError, match="not a spotbench run directory"):
        RunDir.open(tmp_path / "junk", SUITE.config(), [0])


def test_other_bytes_of_a_recorded_input_are_refused(tmp_path) -> None:
    inputs = {"checkpoints": {"spot:x": "a" * 64}, "data": {"gsm8k_test.jsonl": "b" * 64}}
    RunDir.open(tmp_path / "run", SUITE.config(), [0], inputs=inputs)
    RunDir.open(tmp_path / "run", SUITE.config(), [0], inputs=inputs | {"checkpoints": {"spot:y": "c" * 64}})
    assert RunDir(tmp_path / "run").manifest()["inputs"]["checkpoints"] == {"spot:x": "a" * 64, "spot:y": "c" * 64}
    with pytest.raises(UserError, match=r"other bytes .*checkpoint spot:x"):
        RunDir.open(tmp_path / "run", SUITE.config(), [0], inputs={"checkpoints": {"spot:x": "d" * 64}})


def test_manifest_records_provenance(tmp_path) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0], hardware={"cpus": 2}, command=["spotbench", "run"])
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION and manifest["status"] == "running"
    assert manifest["config"] == SUITE.config() and manifest["seeds"] == [0]
    assert manifest["packages"]["pyarrow"] and manifest["hardware"] == {"cpus": 2}
    assert manifest["git_revision"] is None or len(manifest["git_revision"]) >= 40
    assert manifest["command"] == ["spotbench", "run"] and manifest["sessions"][0]["resumed"] is False
    run.end_session("complete", duration_s=1.5, worker_deaths=1, retries=2)
    manifest = run.manifest()
    assert manifest["status"] == "complete" and manifest["resumes"] == 0
    assert manifest["sessions"][0] | {"finished": None} == {
        "started": manifest["sessions"][0]["started"],
        "command": ["spotbench", "run"],
        "resumed": False,
        "finished": None,
        "status": "complete",
        "error": None,
        "duration_s": 1.5,
        "worker_deaths": 1,
        "retries": 2,
    }
    with pytest.raises(ValueError):
        run.update_manifest(status="done")


def test_summary_is_ratios_of_sums_per_arm(tmp_path, groups) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    for rows in groups:
        run.write_group(rows)
    rows = run.read_rows().to_pylist()
    summary = {(r["proposer"], r["budget"]): r for r in run.write_summary().to_pylist()}
    assert len(summary) == 4 and all(r["n"] == 2 for r in summary.values())
    arm = [r for r in rows if (r["proposer"], r["budget"]) == ("confidence", 4)]
    expected = sum(r["plain_target_forwards"] for r in arm) / sum(r["spec_target_forwards"] for r in arm)
    assert summary["confidence", 4]["speedup_nfe"] == pytest.approx(expected)
    low, high = summary["confidence", 4]["speedup_nfe_ci95"]
    assert low <= expected <= high
    assert summary["confidence", 4]["exact_rate"] == 1.0
    assert summary["confidence", 0]["speedup_nfe"] == 1.0

    broken = [r | {"exact": False, "verdict": "logic-error"} if i == 0 else r for i, r in enumerate(rows)]
    worst = summarize(pa.Table.from_pylist(broken, schema=ROW_SCHEMA)).to_pylist()
    assert sorted(r["exact_rate"] for r in worst)[0] == 0.5
    summary_file = pq.read_table(tmp_path / "run" / "summary.parquet")
    assert summary_file.num_rows == 4
    record = json.loads(summary_file.schema.metadata[SUMMARY_METADATA])
    assert record["config"] == SUITE.config() and record["status"] == "complete"
    assert run.manifest()["summary_sha256"] == sha256_file(tmp_path / "run" / "summary.parquet")
    assert run.manifest()["groups"] == 2 and run.manifest()["rows"] == 8


def test_speedup_interval_resamples_prompts_with_their_seeds_together() -> None:
    # Prompt a: seeds at 2x and 1x, b: 1x twice. Drawing prompts, the highest draw is a twice, 4/3;
    # drawing rows, a's 2x seed three times of four (5% of draws) would push the top past 1.5.
    rows = [
        {"sample_id": s, "plain_target_forwards": 10, "spec_target_forwards": spec}
        for s, spec in (("a", 5), ("a", 10), ("b", 10), ("b", 10))
    ]
    assert interval(_joint_draws({"arm": rows})["arm"]) == pytest.approx((1.0, 4 / 3))


def test_exact_mode_rows_are_float64_and_exact() -> None:
    suite = Suite(
        **{**SUITE.__dict__, "exact": True, "proposers": ("confidence",), "budgets": (4,), "temperatures": (1.0,)}
    )
    sample = get_task("arith").load("test", limit=1)[0]
    [[row]] = UnitDecoder(suite).decode(Unit(suite.models[0], "arith", (sample,), tuple(suite.groups())))
    assert row.exact_mode and row.near_tie_tolerance == 1e-9
    assert row.exact and row.spec_completion == row.completion


def test_any_noise_seed_is_stored_exactly(tmp_path, groups) -> None:
    """The seed column is uint64: seeds at and above 2**63 (which the noise takes) round-trip."""
    run = RunDir.open(tmp_path / "run", SUITE.config() | {"seeds": [2**64 - 1]}, [2**64 - 1])
    rows = [dataclasses.replace(r, seed=2**64 - 1) for r in groups[0]]
    assert run.write_group(rows)
    assert set(run.read_rows().column("seed").to_pylist()) == {2**64 - 1}

"""Run-directory integrity against forgers: a run that does not hold what its manifest says is
caught, a consistent edit passes verify and only the digest refuses it, and a resume refuses rows
its summary does not summarize. Each test starts from a copy of the clean run (conftest.py)."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.errors import UserError
from harness.runs.files import INDEX_FILE, read_parquet, run_digest, sha256_file, write_parquet
from harness.runs.run_dir import RunDir
from harness.runs.schema import ROW_SCHEMA
from spotbench.cli import main


def _forge_manifest(run: RunDir, change) -> None:
    manifest = json.loads(run.manifest_path.read_text())
    change(manifest)
    run.manifest_path.write_text(json.dumps(manifest))


def _copy_over_another_group(run: RunDir, forge_index) -> None:
    first, second = sorted(run.samples_dir.glob("*.parquet"))
    shutil.copy(first, second)
    forge_index(run, second.name, sha256=sha256_file(second))


def _rename_into_another_group(run: RunDir, forge_index) -> None:
    first, second = sorted(run.samples_dir.glob("*.parquet"))
    entries = [json.loads(line) for line in (run.path / INDEX_FILE).read_text().splitlines()]
    second_entry = next(e for e in entries if e["file"] == second.name)
    second.unlink()
    first.rename(second)  # the first group's rows under the second's name: the index keeps the first's group
    forge_index(
        run,
        second.name,
        sha256=sha256_file(second),
        group=next(e for e in entries if e["file"] == first.name)["group"],
        label=second_entry["label"],
    )
    forge_index(run, first.name, removed="forged")
    with (run.path / INDEX_FILE).open("a") as index:
        index.write(json.dumps({"file": first.name, "removed": "forged"}) + "\n")
    _forge_manifest(run, lambda m: m.update(groups=1, rows=4))


def _rewrite_summary(run: RunDir, forge_index) -> None:
    table = pq.read_table(run.summary_path)
    column = table.schema.get_field_index("speedup_nfe")
    pq.write_table(
        table.set_column(column, "speedup_nfe", pa.array([100.0] * table.num_rows)).replace_schema_metadata(
            table.schema.metadata
        ),
        run.summary_path,
    )
    _forge_manifest(run, lambda m: m.update(summary_sha256=sha256_file(run.summary_path)))


def _in_manifest(change):
    """A forgery of the manifest alone (a forger `(run, forge_index)` that needs no index line)."""
    return lambda run, forge_index: _forge_manifest(run, change)


def _set(key, value):
    return _in_manifest(lambda manifest: manifest["config"].__setitem__(key, value))


FORGERIES = {  # forgers (run, forge_index), forge_index being the conftest fixture
    "file copied over another group's, index updated": (
        _copy_over_another_group,
        "not of the group it is indexed under (a file of another group in its place)",
    ),
    "file renamed to another group's name, index updated": (_rename_into_another_group, "its rows belong in samples/"),
    "manifest limit raised": (
        _set("limit", 3),
        "index.jsonl: tiny-random:sdar/arith has 2 prompts, the config plans 3",
    ),
    "manifest limit lowered": (_set("limit", 1), "manifest.json: config says limit 1, and the rows hold 2 prompts"),
    "manifest temperature added": (
        _set("temperatures", [0.0, 1.0]),
        "T=1 top1 seed 0 batch 8 lacks every arm of the config the manifest records",
    ),
    "manifest temperature replaced": (
        _set("temperatures", [1.0]),
        "rows of temperature 0.0, which the run's config does not name",
    ),
    "manifest budget dropped": (_set("budgets", [4]), "rows of budget 0, which the run's config does not name"),
    "summary_sha256 removed": (
        _in_manifest(lambda m: m.pop("summary_sha256")),
        "manifest.json: a complete run's manifest without summary_sha256",
    ),
    "summary rewritten, its sha256 updated": (_rewrite_summary, "speedup_nfe is 100.0, its rows give"),
    "manifest inputs edited": (
        _in_manifest(lambda m: m["inputs"]["checkpoints"].update(x="0" * 64)),
        "summary.parquet: its metadata's inputs differs from manifest.json's",
    ),
}


@pytest.mark.parametrize("kind", FORGERIES)
def test_a_run_that_does_not_hold_what_its_manifest_says_is_caught(kind, clean, forge_index, tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    forge, message = FORGERIES[kind]
    forge(run, forge_index)
    assert main(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    assert message in out and "digest" not in out, out
    assert run_digest(run.path) != run_digest(clean.path)
    assert main(["gate", str(run.path), "--baseline", str(clean.path)]) == 2
    assert "is damaged" in capsys.readouterr().err


def test_a_resumed_run_decodes_a_misfiled_group_again_and_counts_each_prompt_once(
    clean, suite, forge_index, tmp_path
) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    _copy_over_another_group(run, forge_index)
    before = run.verify()
    assert len(before.parts) == 1 and len(before.damage) == 1
    reopened = RunDir.open(run.path, suite.config(), [0])
    verification = reopened.verify()
    assert not verification.damage and len(verification.parts) == 1  # the misfiled copy is out, its group planned
    assert len({r["sample_id"] for r in verification.rows(ROW_SCHEMA).to_pylist()}) == 1


def test_a_deliberate_consistent_edit_passes_verify_and_only_the_digest_refuses_it(
    clean, forge_index, tmp_path, capsys
) -> None:
    """What the checks cannot see: rows edited and every record made to agree. The digest pins it."""
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    first = sorted(run.samples_dir.glob("*.parquet"))[0]
    table = read_parquet(first)
    write_parquet(
        table.set_column(
            table.schema.get_field_index("spec_wall_s"),
            "spec_wall_s",
            pa.array([w / 2 for w in table.column("spec_wall_s").to_pylist()]),
        ),
        first,
    )
    forge_index(run, first.name, sha256=sha256_file(first))
    run.update_manifest(status="running")  # the forger recomputes the summary and its sha256 too
    run.write_summary()
    run.update_manifest(status="complete")
    assert main(["verify", str(run.path)]) == 0
    forged_digest = capsys.readouterr().out.strip().splitlines()[-1].removeprefix("digest ")
    recorded = run_digest(clean.path)
    assert forged_digest != recorded
    assert main(["gate", str(clean.path), "--baseline", str(run.path), "--baseline-digest", recorded]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotbench: error: ") and f"has digest {forged_digest}, not {recorded}" in err
    assert err.count("\n") == 1
    # negative control: the recorded baseline itself passes with its digest
    assert main(["gate", str(clean.path), "--baseline", str(clean.path), "--baseline-digest", recorded]) == 0
    capsys.readouterr()
    for bad, why in ((recorded[:10], "is not a digest"), ("sha256:" + recorded, None)):
        code = main(["gate", str(clean.path), "--baseline", str(clean.path), "--baseline-digest", bad])
        assert code == (2 if why else 0) and (why is None or why in capsys.readouterr().err)
    assert main(["gate", str(clean.path), "--baseline", str(clean.summary_path), "--baseline-digest", recorded]) == 0


def _snapshot(directory) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_resume_refuses_rows_the_summary_does_not_summarize_and_writes_nothing(
    clean, suite, half_done_edit, tmp_path, capsys
) -> None:
    """A half-done edit (a row and its index line, not the summary) is found by verify; resuming must
    not rebuild the summary from the edited rows (after which verify would pass), but refuse."""
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    half_done_edit(run)
    assert main(["verify", str(run.path)]) == 1
    assert "summary.parquet: tiny-random:sdar/arith" in capsys.readouterr().out
    before = _snapshot(run.path)
    with pytest.raises(UserError, match=r"cannot be resumed: summary\.parquet: .* restore .* new output directory"):
        RunDir.open(run.path, suite.config(), [0])
    assert _snapshot(run.path) == before
    command = ["run", "--models", "tiny-random:sdar", "--proposers", "confidence,oracle", "--limit", "2"]
    command += ["--temperatures", "0", "--budgets", "0,4", "--gen-length", "16", "--block-length", "8"]
    assert main([*command, "--output", str(run.path), "--no-progress"]) == 2  # refused before Ray would start
    err = capsys.readouterr().err
    assert err.startswith("spotbench: error: ") and err.count("\n") == 1 and "cannot be resumed" in err, err
    assert _snapshot(run.path) == before and main(["verify", str(run.path)]) == 1
    # negative control: the same command resumes the clean run (nothing to decode, so no Ray either)
    intact = tmp_path / "intact"
    shutil.copytree(clean.path, intact)
    assert main([*command, "--output", str(intact), "--no-progress"]) == 0
    assert main(["verify", str(intact)]) == 0


def test_config_history_records_only_extensions_that_add_work(suite, tmp_path) -> None:
    """A larger limit adds the next prompts of a split; past the split's end it adds none, and the
    run's config and history stay as they were (no extension happened)."""
    small = suite.config() | {"limit": 2}
    RunDir.open(tmp_path / "whole", small, [0], split_sizes={"arith": 2})
    reopened = RunDir.open(tmp_path / "whole", small | {"limit": 5}, [0], split_sizes={"arith": 2})
    manifest = reopened.manifest()
    assert manifest["config_history"] == [] and manifest["config"]["limit"] == 2
    assert manifest["sessions"][-1]["extended"] == {}
    grown = RunDir.open(tmp_path / "whole", small | {"limit": 5, "budgets": [0, 4, 8]}, [0], split_sizes={"arith": 2})
    [entry] = grown.manifest()["config_history"]
    assert entry["changes"] == {"budgets": [[0, 4], [0, 4, 8]]} and grown.manifest()["config"]["limit"] == 2
    # negative control: a split with more prompts grows with the limit, and the history says so
    RunDir.open(tmp_path / "part", small, [0], split_sizes={"arith": 24})
    extended = RunDir.open(tmp_path / "part", small | {"limit": 5}, [0], split_sizes={"arith": 24}).manifest()
    assert [e["changes"] for e in extended["config_history"]] == [{"limit": [2, 5]}]
    assert extended["config"]["limit"] == 5 and extended["sessions"][-1]["extended"] == {"limit": [2, 5]}

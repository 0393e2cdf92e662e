"""Run-directory integrity: every kind of damage is found, named, refused by readers and recomputed.

Each damage test starts from a copy of one clean complete run; the clean copy verifies (exit 0), so
a check that flags everything would fail the control, and one that flags nothing fails the rest."""

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.evaluate import Evaluator, Unit
from cluster.suite import Suite
from harness.errors import UserError
from harness.runs.run_dir import RunDir
from harness.runs.schema import ROW_SCHEMA, SCHEMA_VERSION
from harness.runs.files import INDEX_FILE, read_parquet, run_digest, sha256_file, write_parquet
from harness.runs.verify import AR_RULE as RUN_AR_RULE
from spotbench.cli import main
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


def _write(path, samples) -> RunDir:
    run = RunDir.open(path, SUITE.config(), [0], split_sizes={"arith": len(get_task("arith").load("test"))})
    evaluator = Evaluator(SUITE)
    for sample in samples:
        for rows in evaluator.evaluate(Unit(SUITE.models[0], "arith", (sample,), tuple(SUITE.groups()))):
            run.write_group(rows)
    run.write_summary()
    run.end_session("complete")
    return run


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> RunDir:
    return _write(tmp_path_factory.mktemp("store") / "clean", get_task("arith").load("test", limit=2))


@pytest.fixture(scope="module")
def foreign_file(tmp_path_factory):
    """A valid sample file of another run (the third prompt): right schema, wrong run."""
    other = _write(tmp_path_factory.mktemp("store") / "other", get_task("arith").load("test", limit=3)[2:])
    return next(other.samples_dir.glob("*.parquet"))


def rewrite(path, change) -> None:
    pq.write_table(change(pq.read_table(path)), path)


def flip_bit(path) -> None:
    """One bit flipped where only the page checksum can see it: the last byte of a column chunk, which
    is page payload (a flip in the footer or a page header would be found by other checks). The first
    chunk whose flip a checksum-verifying read rejects, so the test does not depend on the layout."""
    clean = path.read_bytes()
    metadata = pq.ParquetFile(path).metadata.row_group(0)
    for column in (metadata.column(i) for i in range(metadata.num_columns)):
        start = column.dictionary_page_offset or column.data_page_offset
        data = bytearray(clean)
        data[start + column.total_compressed_size - 1] ^= 0x10
        path.write_bytes(bytes(data))
        try:
            read_parquet(path)
        except Exception as error:  # noqa: BLE001 - pyarrow raises several types for damaged bytes
            if "CRC" in str(error):
                return
    raise AssertionError("no column chunk's last byte is covered by a page checksum")


DAMAGE = {
    "truncated": (
        lambda f, foreign: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]),
        "not a readable Parquet file",
    ),
    "bit flip": (lambda f, foreign: flip_bit(f), "page checksum mismatch"),
    "deleted row": (lambda f, foreign: rewrite(f, lambda t: t.slice(1)), "3 rows, 4 when written (rows deleted)"),
    "duplicated row": (
        lambda f, foreign: rewrite(f, lambda t: pa.concat_tables([t, t.slice(0, 1)])),
        "duplicated rows: key confidence@0 appears more than once",
    ),
    "duplicated file": (lambda f, foreign: shutil.copy(f, f.with_name("copy.parquet")), "a copy of samples/"),
    "missing file": (lambda f, foreign: f.unlink(), "missing (listed in index.jsonl)"),
    "foreign parquet": (lambda f, foreign: shutil.copy(foreign, f.parent), "not written by this run"),
    "wrong schema": (
        lambda f, foreign: rewrite(f, lambda t: t.drop_columns(["prompt"])),
        f"wrong schema, not a version-{SCHEMA_VERSION} sample file (missing prompt)",
    ),
}


def test_a_clean_run_verifies_and_prints_the_digest_sha256sum_gives(clean, capsys) -> None:
    assert main(["verify", str(clean.path)]) == 0
    summary, digest = capsys.readouterr().out.strip().splitlines()
    assert summary.endswith(
        "2 groups in 2 files, 8 rows, each once (sha256 and Parquet page checksums match), "
        "summary recomputed from the rows"
    )
    assert digest == f"digest {run_digest(clean.path)}"
    # the recipe docs/run_directories.md gives, with coreutils: anyone can recompute the digest
    listing = subprocess.run(
        "LC_ALL=C sha256sum manifest.json index.jsonl samples/*.parquet summary.parquet",
        shell=True,
        cwd=clean.path,
        capture_output=True,
        check=True,
    ).stdout
    assert hashlib.sha256(listing).hexdigest() == run_digest(clean.path)


def _forge_index(run: RunDir, name: str, **changes) -> None:
    """Rewrite the index line of sample file `name` (a forger keeping the index consistent)."""
    lines = [json.loads(line) for line in (run.path / INDEX_FILE).read_text().splitlines()]
    for line in lines:
        if line["file"] == name:
            line.update(changes)
    (run.path / INDEX_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))


def _forge_manifest(run: RunDir, change) -> None:
    manifest = json.loads(run.manifest_path.read_text())
    change(manifest)
    run.manifest_path.write_text(json.dumps(manifest))


def _copy_over_another_group(run: RunDir) -> None:
    first, second = sorted(run.samples_dir.glob("*.parquet"))
    shutil.copy(first, second)
    _forge_index(run, second.name, sha256=sha256_file(second))


def _set(key, value):
    return lambda manifest: manifest["config"].__setitem__(key, value)


FORGERIES = {
    "file copied over another group's, index updated": (
        _copy_over_another_group,
        "not of the group it is indexed under (a file of another group in its place)",
    ),
    "file renamed to another group's name, index updated": (
        lambda run: _rename_into_another_group(run),
        "its rows belong in samples/",
    ),
    "manifest limit raised": (
        lambda run: _forge_manifest(run, _set("limit", 3)),
        "index.jsonl: tiny-random:sdar/arith has 2 prompts, the config plans 3",
    ),
    "manifest limit lowered": (
        lambda run: _forge_manifest(run, _set("limit", 1)),
        "manifest.json: config says limit 1, and the rows hold 2 prompts",
    ),
    "manifest temperature added": (
        lambda run: _forge_manifest(run, _set("temperatures", [0.0, 1.0])),
        "T=1 top1 seed 0 batch 8 lacks every arm of the config the manifest records",
    ),
    "manifest temperature replaced": (
        lambda run: _forge_manifest(run, _set("temperatures", [1.0])),
        "rows of temperature 0.0, which the run's config does not name",
    ),
    "manifest budget dropped": (
        lambda run: _forge_manifest(run, _set("budgets", [4])),
        "rows of budget 0, which the run's config does not name",
    ),
    "summary_sha256 removed": (
        lambda run: _forge_manifest(run, lambda m: m.pop("summary_sha256")),
        "manifest.json: a complete run's manifest without summary_sha256",
    ),
    "summary rewritten, its sha256 updated": (lambda run: _rewrite_summary(run), "speedup_nfe is 100.0, its rows give"),
    "manifest inputs edited": (
        lambda run: _forge_manifest(run, lambda m: m["inputs"]["checkpoints"].update(x="0" * 64)),
        "summary.parquet: its metadata's inputs differs from manifest.json's",
    ),
}


def _rename_into_another_group(run: RunDir) -> None:
    first, second = sorted(run.samples_dir.glob("*.parquet"))
    entries = [json.loads(line) for line in (run.path / INDEX_FILE).read_text().splitlines()]
    second_entry = next(e for e in entries if e["file"] == second.name)
    second.unlink()
    first.rename(second)  # the first group's rows under the second's name: the index keeps the first's group
    _forge_index(
        run,
        second.name,
        sha256=sha256_file(second),
        group=next(e for e in entries if e["file"] == first.name)["group"],
        label=second_entry["label"],
    )
    _forge_index(run, first.name, removed="forged")
    with (run.path / INDEX_FILE).open("a") as index:
        index.write(json.dumps({"file": first.name, "removed": "forged"}) + "\n")
    _forge_manifest(run, lambda m: m.update(groups=1, rows=4))


def _rewrite_summary(run: RunDir) -> None:
    table = pq.read_table(run.summary_path)
    rewrite(
        run.summary_path,
        lambda t: t.set_column(
            t.schema.get_field_index("speedup_nfe"), "speedup_nfe", pa.array([100.0] * t.num_rows)
        ).replace_schema_metadata(table.schema.metadata),
    )
    _forge_manifest(run, lambda m: m.update(summary_sha256=sha256_file(run.summary_path)))


@pytest.mark.parametrize("kind", FORGERIES)
def test_a_run_that_does_not_hold_what_its_manifest_says_is_caught(kind, clean, tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    forge, message = FORGERIES[kind]
    forge(run)
    assert main(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    assert message in out and "digest" not in out, out
    assert run_digest(run.path) != run_digest(clean.path)
    assert main(["gate", str(run.path), "--baseline", str(clean.path)]) == 2
    assert "is damaged" in capsys.readouterr().err


def test_a_resumed_run_decodes_a_misfiled_group_again_and_counts_each_prompt_once(clean, tmp_path) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    _copy_over_another_group(run)
    before = run.verify()
    assert len(before.parts) == 1 and len(before.damage) == 1
    reopened = RunDir.open(run.path, SUITE.config(), [0])
    verification = reopened.verify()
    assert not verification.damage and len(verification.parts) == 1  # the misfiled copy is out, its group planned
    assert len({r["sample_id"] for r in verification.rows(ROW_SCHEMA).to_pylist()}) == 1


def test_a_deliberate_consistent_edit_passes_verify_and_only_the_digest_refuses_it(clean, tmp_path, capsys) -> None:
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
    _forge_index(run, first.name, sha256=sha256_file(first))
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


@pytest.mark.parametrize("kind", DAMAGE)
def test_every_kind_of_damage_is_one_line_naming_the_file_and_readers_refuse_it(
    kind, clean, foreign_file, tmp_path, capsys
) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    damage, message = DAMAGE[kind]
    target = sorted(run.samples_dir.glob("*.parquet"))[0]
    damage(target, foreign_file)
    assert main(["verify", str(run.path)]) == 1
    [line] = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"{run.path}/samples/") and message in line, line
    assert "tiny-random:sdar/arith/test/" in line  # the group, as people name it
    with pytest.raises(UserError, match=r"is damaged: samples/.*spotbench verify"):
        run.read_rows()
    assert main(["report", str(run.path)]) == 2
    assert "is damaged" in capsys.readouterr().err
    assert not (run.path / "report.html").exists()


def test_verify_input_errors_are_exit_2(tmp_path, capsys) -> None:
    assert main(["verify", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 3}))
    assert main(["verify", str(tmp_path)]) == 2
    assert "schema version 3" in capsys.readouterr().err


def test_a_group_removed_with_its_index_line_and_an_edited_summary_are_found(clean, tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    index = (run.path / INDEX_FILE).read_text().splitlines()
    (run.samples_dir / json.loads(index[0])["file"]).unlink()
    (run.path / INDEX_FILE).write_text("\n".join(index[1:]) + "\n")
    rewrite(run.path / "summary.parquet", lambda t: t.slice(1))
    assert main(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    assert "index.jsonl: lists 1 groups, the complete run wrote 2" in out
    assert "summary.parquet: changed since the run completed" in out


def test_reopening_moves_damage_aside_and_plans_its_group_again(clean, tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    first, second = sorted(run.samples_dir.glob("*.parquet"))
    flip_bit(first)
    shutil.copy(second, run.samples_dir / "copy.parquet")
    with (run.path / INDEX_FILE).open("a") as index:
        index.write('{"file": "cut-sho')  # an append cut short by a killed driver
    assert len(run.verify().damage) == 3
    reopened = RunDir.open(run.path, SUITE.config(), [0])
    verification = reopened.verify()
    assert not verification.damage and list(verification.parts) == [second.name]
    assert sorted(p.name.rsplit(".", 1)[0] for p in (run.path / "damaged").iterdir()) == sorted(
        [f"{first.name}", "copy.parquet"]
    )
    assert len(reopened.manifest()["sessions"][-1]["damaged"]) == 3
    assert not (run.path / "summary.parquet").exists()  # it summarized the run before the damage


def test_page_checksums_are_written_and_checked_on_read(clean, tmp_path) -> None:
    path = tmp_path / "flipped.parquet"
    shutil.copy(sorted(clean.samples_dir.glob("*.parquet"))[0], path)
    assert read_parquet(path).num_rows == 4
    clean_bytes = path.read_bytes()
    clean_table = pq.read_table(path)
    for offset in range(len(clean_bytes) // 8, len(clean_bytes) // 2):  # a bit that plain reading misses
        damaged = bytearray(clean_bytes)
        damaged[offset] ^= 0x10
        path.write_bytes(bytes(damaged))
        try:
            table = pq.read_table(path)  # negative control: no verification, no error, other values
        except (OSError, pa.ArrowException):  # a bit that plain reading catches: try the next one
            continue
        if table.num_rows == 4 and not table.equals(clean_table):  # (a bit no reader reads changes nothing)
            break
    else:
        pytest.fail("no bit whose flip plain reading misses")
    with pytest.raises(OSError, match="CRC checksum verification failed"):
        read_parquet(path)


def test_the_rule_of_autoregressive_rows_is_the_decoders() -> None:
    from harness.decoding.autoregressive import AR_RULE

    assert RUN_AR_RULE == AR_RULE


def _half_done_edit(run: RunDir) -> None:
    """One row's spec_nfe edited and its index line made to agree; the summary left as it was."""
    first = sorted(run.samples_dir.glob("*.parquet"))[0]
    table = read_parquet(first)
    column = table.schema.get_field_index("spec_nfe")
    edited = [n + (i == 0) for i, n in enumerate(table.column("spec_nfe").to_pylist())]
    write_parquet(table.set_column(column, table.schema.field(column), pa.array(edited, pa.int64())), first)
    _forge_index(run, first.name, sha256=sha256_file(first))


def _snapshot(directory) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_resume_refuses_rows_the_summary_does_not_summarize_and_writes_nothing(clean, tmp_path, capsys) -> None:
    """A half-done edit (a row and its index line, not the summary) is found by verify; resuming must
    not rebuild the summary from the edited rows (after which verify would pass), but refuse."""
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    _half_done_edit(run)
    assert main(["verify", str(run.path)]) == 1
    assert "summary.parquet: tiny-random:sdar/arith" in capsys.readouterr().out
    before = _snapshot(run.path)
    with pytest.raises(UserError, match=r"cannot be resumed: summary\.parquet: .* restore .* new output directory"):
        RunDir.open(run.path, SUITE.config(), [0])
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


def test_config_history_records_only_extensions_that_add_work(tmp_path) -> None:
    """A larger limit adds the next prompts of a split; past the split's end it adds none, and the
    run's config and history stay as they were (no extension happened)."""
    small = SUITE.config() | {"limit": 2}
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


DAMAGED_RUNS = {
    "truncated": lambda run: _truncate(sorted(run.samples_dir.glob("*.parquet"))[0]),
    "bit flip": lambda run: flip_bit(sorted(run.samples_dir.glob("*.parquet"))[0]),
    "half-done edit": _half_done_edit,
}


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.slow
def test_readers_of_a_damaged_run_exit_with_their_code_and_one_line_every_time(clean, tmp_path) -> None:
    """report, verify and gate on damaged runs, 20 times each in fresh interpreters: each exits with
    its status and says its line, and nothing after it (no native thread aborting the exit)."""
    runs = {}
    for kind, damage in DAMAGED_RUNS.items():
        runs[kind] = RunDir(tmp_path / kind.replace(" ", "-"))
        shutil.copytree(clean.path, runs[kind].path)
        damage(runs[kind])
    commands = {
        "report": (lambda path: ["report", path], 2),
        "verify": (lambda path: ["verify", path], 1),
        "gate": (lambda path: ["gate", path, "--baseline", str(clean.path)], 2),
    }
    for name, (argv, code), attempt in ((n, c, a) for n, c in commands.items() for a in range(20)):
        run = list(runs.values())[attempt % len(runs)]  # one at a time: side by side, the exits race less
        done = subprocess.run(
            [sys.executable, "-m", "spotbench.cli", *argv(str(run.path))], capture_output=True, text=True, timeout=300
        )
        where = f"{name} on {run.path.name}, call {attempt + 1}: rc {done.returncode}, stderr {done.stderr!r}"
        assert done.returncode == code, where
        if code == 1:  # verify: the damage on stdout, nothing on stderr
            assert done.stderr == "" and done.stdout.startswith(str(run.path)), where
        else:
            assert done.stderr.startswith("spotbench: error: ") and done.stderr.count("\n") == 1, where
            assert "is damaged" in done.stderr, where
    assert not any((run.path / "report.html").exists() for run in runs.values())


def test_a_run_at_each_targets_own_block_length_verifies(tmp_path) -> None:
    """A config without a block length (each target decodes at its trained one) names no block length
    to hold rows to: such a run writes, summarizes and verifies like any other."""
    suite = dataclasses.replace(SUITE, block_length=None, limit=1)
    run = RunDir.open(tmp_path, suite.config(), [0], split_sizes={"arith": len(get_task("arith").load("test"))})
    [sample] = get_task("arith").load("test", limit=1)
    for rows in Evaluator(suite).evaluate(Unit(suite.models[0], "arith", (sample,), tuple(suite.groups()))):
        assert {r.block_length for r in rows} == {32} and {r.block_length_trained for r in rows} == {None}
        run.write_group(rows)
    run.write_summary()
    run.end_session("complete")
    assert not run.verify().damage

"""Run-directory integrity: every kind of damage is found, named, refused by readers and recomputed.

Each damage test starts from a copy of one clean complete run; the clean copy verifies (exit 0), so
a check that flags everything would fail the control, and one that flags nothing fails the rest.
Runs that do not hold what their manifest says (forgeries): test_verify_forgeries.py."""

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.unit_decoder import UnitDecoder, Unit
from harness.errors import UserError
from harness.runs.files import INDEX_FILE, read_parquet, run_digest
from harness.runs.run_dir import RunDir
from harness.runs.schema import SCHEMA_VERSION
from harness.runs.verify import AR_RULE as RUN_AR_RULE
from spotbench.cli import main
from tasks.registry import get_task


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


def test_reopening_moves_damage_aside_and_plans_its_group_again(clean, suite, tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    first, second = sorted(run.samples_dir.glob("*.parquet"))
    flip_bit(first)
    shutil.copy(second, run.samples_dir / "copy.parquet")
    with (run.path / INDEX_FILE).open("a") as index:
        index.write('{"file": "cut-sho')  # an append cut short by a killed driver
    assert len(run.verify().damage) == 3
    reopened = RunDir.open(run.path, suite.config(), [0])
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


DAMAGED_RUNS = {  # and the half-done edit, a conftest fixture
    "truncated": lambda run: _truncate(sorted(run.samples_dir.glob("*.parquet"))[0]),
    "bit flip": lambda run: flip_bit(sorted(run.samples_dir.glob("*.parquet"))[0]),
}


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.slow
def test_readers_of_a_damaged_run_exit_with_their_code_and_one_line_every_time(clean, half_done_edit, tmp_path) -> None:
    """report, verify and gate on damaged runs, 20 times each in fresh interpreters: each exits with
    its status and says its line, and nothing after it (no native thread aborting the exit)."""
    runs = {}
    for kind, damage in (DAMAGED_RUNS | {"half-done edit": half_done_edit}).items():
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


def test_a_run_at_each_targets_own_block_length_verifies(suite, tmp_path) -> None:
    """A config without a block length (each target decodes at its trained one) names no block length
    to hold rows to: such a run writes, summarizes and verifies like any other."""
    suite = dataclasses.replace(suite, block_length=None, limit=1)
    run = RunDir.open(tmp_path, suite.config(), [0], split_sizes={"arith": len(get_task("arith").load("test"))})
    [sample] = get_task("arith").load("test", limit=1)
    for rows in UnitDecoder(suite).decode(Unit(suite.models[0], "arith", (sample,), tuple(suite.groups()))):
        assert {r.block_length for r in rows} == {32} and {r.block_length_trained for r in rows} == {None}
        run.write_group(rows)
    run.write_summary()
    run.end_session("complete")
    assert not run.verify().damage

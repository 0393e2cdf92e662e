"""Run-directory integrity: every kind of damage is found, named, refused by readers and recomputed.

Each damage test starts from a copy of one clean complete run; the clean copy verifies (exit 0), so
a check that flags everything would fail the control, and one that flags nothing fails the rest."""

import dataclasses
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.evaluate import Evaluator, Unit
from cluster.suite import Suite
from harness.errors import UserError
from harness.results import SCHEMA_VERSION, RunDir
from harness.store import INDEX_FILE, read_parquet
from spotbench.cli import main
from tasks.registry import get_task

SUITE = Suite(models=("tiny-random:sdar",), proposers=("confidence", "oracle"), limit=2, temperatures=(0.0,),
              budgets=(0, 4), gen_length=16, block_length=8)


def _write(path, samples) -> RunDir:
    run = RunDir.open(path, SUITE.config(), [0])
    evaluator = Evaluator(SUITE)
    for sample in samples:
        for rows in evaluator.evaluate(Unit(SUITE.models[0], "arith", sample, SUITE.groups())):
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
        except Exception as error:  # pyarrow raises several types for damaged bytes
            if "CRC" in str(error):
                return
    raise AssertionError("no column chunk's last byte is covered by a page checksum")


DAMAGE = {
    "truncated": (lambda f, foreign: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]), "not a readable Parquet file"),
    "bit flip": (lambda f, foreign: flip_bit(f), "page checksum mismatch"),
    "deleted row": (lambda f, foreign: rewrite(f, lambda t: t.slice(1)), "3 rows, 4 when written (rows deleted)"),
    "duplicated row": (lambda f, foreign: rewrite(f, lambda t: pa.concat_tables([t, t.slice(0, 1)])),
                       "duplicated rows: key confidence@0 appears more than once"),
    "duplicated file": (lambda f, foreign: shutil.copy(f, f.with_name("copy.parquet")), "a copy of samples/"),
    "missing file": (lambda f, foreign: f.unlink(), "missing (listed in index.jsonl)"),
    "foreign parquet": (lambda f, foreign: shutil.copy(foreign, f.parent), "not written by this run"),
    "wrong schema": (lambda f, foreign: rewrite(f, lambda t: t.drop_columns(["prompt"])),
                     f"wrong schema, not a version-{SCHEMA_VERSION} sample file (missing prompt)"),
}


def test_a_clean_run_verifies(clean, capsys) -> None:
    assert main(["verify", str(clean.path)]) == 0
    assert capsys.readouterr().out.strip().endswith("2 groups in 2 files, 8 rows, each once (sha256 and Parquet "
                                                    "page checksums match)")


@pytest.mark.parametrize("kind", DAMAGE)
def test_every_kind_of_damage_is_one_line_naming_the_file_and_readers_refuse_it(kind, clean, foreign_file,
                                                                                tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(clean.path, run.path)
    damage, message = DAMAGE[kind]
    target = sorted(run.samples_dir.glob("*.parquet"))[0]
    damage(target, foreign_file)
    assert main(["verify", str(run.path)]) == 1
    [line] = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"{run.path}/samples/") and message in line, line
    assert "tiny-random:sdar/arith/test/" in line  # the group, as people name it
    with pytest.raises(UserError, match="is damaged: samples/.*spotbench verify"):
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
        [f"{first.name}", "copy.parquet"])
    assert len(reopened.manifest()["sessions"][-1]["damaged"]) == 3
    assert not (run.path / "summary.parquet").exists()  # it summarized the run before the damage


def test_page_checksums_are_written_and_checked_on_read(clean, tmp_path) -> None:
    path = tmp_path / "flipped.parquet"
    shutil.copy(sorted(clean.samples_dir.glob("*.parquet"))[0], path)
    assert read_parquet(path).num_rows == 4
    clean_bytes = path.read_bytes()
    for offset in range(len(clean_bytes) // 8, len(clean_bytes) // 2):  # a bit that plain reading misses
        damaged = bytearray(clean_bytes)
        damaged[offset] ^= 0x10
        path.write_bytes(bytes(damaged))
        try:
            unseen = pq.read_table(path).num_rows == 4  # negative control: no verification, no error
        except (OSError, pa.ArrowException):  # a bit that plain reading catches: try the next one
            continue
        if unseen:
            break
    else:
        pytest.fail("no bit whose flip plain reading misses")
    with pytest.raises(OSError, match="CRC checksum verification failed"):
        read_parquet(path)

"""The runs the run-directory tests damage and forge, and the edits both kinds of test make, as
fixtures (conftest modules are not importable under --import-mode=importlib)."""

import json
from collections.abc import Callable

import pyarrow as pa
import pytest

from cluster.unit_decoder import UnitDecoder, Unit
from cluster.suite import Suite
from harness.runs.files import INDEX_FILE, read_parquet, sha256_file, write_parquet
from harness.runs.run_dir import RunDir
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
    unit_decoder = UnitDecoder(SUITE)
    for sample in samples:
        for rows in unit_decoder.decode(Unit(SUITE.models[0], "arith", (sample,), tuple(SUITE.groups()))):
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


@pytest.fixture
def suite() -> Suite:
    """The suite of the clean run: two proposers at budgets 0 and 4 on two arith prompts."""
    return SUITE


def _forge_index(run: RunDir, name: str, **changes) -> None:
    """Rewrite the index line of sample file `name` (a forger keeping the index consistent)."""
    lines = [json.loads(line) for line in (run.path / INDEX_FILE).read_text().splitlines()]
    for line in lines:
        if line["file"] == name:
            line.update(changes)
    (run.path / INDEX_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))


def _half_done_edit(run: RunDir) -> None:
    """One row's spec_nfe edited and its index line made to agree; the summary left as it was."""
    first = sorted(run.samples_dir.glob("*.parquet"))[0]
    table = read_parquet(first)
    column = table.schema.get_field_index("spec_nfe")
    edited = [n + (i == 0) for i, n in enumerate(table.column("spec_nfe").to_pylist())]
    write_parquet(table.set_column(column, table.schema.field(column), pa.array(edited, pa.int64())), first)
    _forge_index(run, first.name, sha256=sha256_file(first))


@pytest.fixture
def forge_index() -> Callable[..., None]:
    """`forge_index(run, name, **changes)`: a forger rewriting the index line of sample file `name`."""
    return _forge_index


@pytest.fixture
def half_done_edit() -> Callable[[RunDir], None]:
    """`half_done_edit(run)`: one row edited and its index line made to agree, the summary not."""
    return _half_done_edit

"""Planning without Ray: what a run, a resumed run and an extended run decode."""

from cluster.runner import chunks, plan
from cluster.suite import Suite
from cluster.unit_decoder import Unit, UnitDecoder
from harness.runs.run_dir import RunDir
from tasks.registry import get_task

SUITE = Suite(
    models=("tiny-random:sdar",),
    proposers=("confidence",),
    limit=2,
    temperatures=(0.0,),
    budgets=(0,),
    gen_length=16,
    block_length=8,
)


def test_plan_skips_verified_groups_and_extends_finished_ones_by_their_new_arms(tmp_path) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    units, skipped = plan(SUITE, run.verify())
    assert (len(units), skipped) == (1, 0) and units[0].arms is None and len(units[0].samples) == 2
    first, _ = UnitDecoder(SUITE).decode(units[0])
    run.write_group(first)
    units, skipped = plan(SUITE, run.verify())
    assert (len(units), skipped) == (1, 1) and [s.sample_id for s in units[0].samples] == ["test/1"]

    bigger = Suite(**{**SUITE.__dict__, "proposers": ("confidence", "oracle"), "budgets": (0, 4), "limit": 3})
    units, skipped = plan(bigger, run.verify())
    by_sample = {s.sample_id: u.arms for u in units for s in u.samples}
    assert skipped == 0 and by_sample == {
        "test/0": (("confidence", 4), ("oracle", 0), ("oracle", 4)),  # the finished group: its new arms only
        "test/1": None,
        "test/2": None,
    }
    [rows] = UnitDecoder(bigger).decode(next(u for u in units if u.samples[0].sample_id == "test/0"))
    assert sorted((r.proposer, r.budget) for r in rows) == [("confidence", 4), ("oracle", 0), ("oracle", 4)]


def test_each_batch_size_is_a_group_of_its_own_and_units_hold_two_batches(tmp_path) -> None:
    suite = Suite(**{**SUITE.__dict__, "limit": 5, "batch_sizes": (1, 2)})
    units, _ = plan(suite, RunDir.open(tmp_path / "run", suite.config(), [0]).verify())
    assert sorted((u.batch_size, len(u.samples)) for u in units) == [(1, 1), (1, 2), (1, 2), (2, 2), (2, 3)]
    assert chunks(list(range(10)), 4) == [(0, 1, 2, 3), (4, 5, 6), (7, 8, 9)] and chunks([], 4) == []
    rows = UnitDecoder(suite).decode(next(u for u in units if u.batch_size == 2 and len(u.samples) == 3))
    assert [r.sample_id for [r] in rows] == [f"test/{i}" for i in range(3)] and {r.batch_size for [r] in rows} == {2}


def test_a_damaged_group_is_not_done(tmp_path) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    sample = get_task("arith").load("test", limit=1)[0]
    for rows in UnitDecoder(SUITE).decode(Unit(SUITE.models[0], "arith", (sample,), tuple(SUITE.groups()))):
        run.write_group(rows)
    assert plan(SUITE, run.verify())[1] == 1
    [path] = run.samples_dir.glob("*.parquet")
    path.write_bytes(path.read_bytes()[:-10])  # cut short: a file with that name is not a done group
    units, skipped = plan(SUITE, run.verify())
    assert skipped == 0 and {s.sample_id for u in units for s in u.samples} == {"test/0", "test/1"}

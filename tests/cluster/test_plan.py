"""Planning without Ray: what a run, a resumed run and an extended run decode."""

from cluster.evaluate import Evaluator, Unit
from cluster.runner import plan
from cluster.suite import Suite
from harness.results import RunDir
from tasks.registry import get_task

SUITE = Suite(models=("tiny-random:sdar",), proposers=("confidence",), limit=2, temperatures=(0.0,),
              budgets=(0,), gen_length=16, block_length=8)


def test_plan_skips_verified_groups_and_extends_finished_ones_by_their_new_arms(tmp_path) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    units, skipped = plan(SUITE, run.verify())
    assert (len(units), skipped) == (2, 0) and all(u.arms is None for u in units)
    for rows in Evaluator(SUITE).evaluate(units[0]):
        run.write_group(rows)
    units, skipped = plan(SUITE, run.verify())
    assert (len(units), skipped) == (1, 1) and units[0].sample.sample_id == "test/1"

    bigger = Suite(**{**SUITE.__dict__, "proposers": ("confidence", "oracle"), "budgets": (0, 4), "limit": 3})
    units, skipped = plan(bigger, run.verify())
    by_sample = {u.sample.sample_id: u.arms for u in units}
    assert skipped == 0 and by_sample == {
        "test/0": (("confidence", 4), ("oracle", 0), ("oracle", 4)),  # the finished group: its new arms only
        "test/1": None, "test/2": None}
    [rows] = Evaluator(bigger).evaluate(next(u for u in units if u.sample.sample_id == "test/0"))
    assert sorted((r.proposer, r.budget) for r in rows) == [("confidence", 4), ("oracle", 0), ("oracle", 4)]


def test_a_damaged_group_is_not_done(tmp_path) -> None:
    run = RunDir.open(tmp_path / "run", SUITE.config(), [0])
    sample = get_task("arith").load("test", limit=1)[0]
    for rows in Evaluator(SUITE).evaluate(Unit(SUITE.models[0], "arith", sample, SUITE.groups())):
        run.write_group(rows)
    assert plan(SUITE, run.verify())[1] == 1
    [path] = run.samples_dir.glob("*.parquet")
    path.write_bytes(path.read_bytes()[:-10])  # cut short: a file with that name is not a done group
    units, skipped = plan(SUITE, run.verify())
    assert skipped == 0 and {u.sample.sample_id for u in units} == {"test/0", "test/1"}

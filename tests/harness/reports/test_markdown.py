"""`spotbench report RUN_DIR --markdown` over a real run of a zoo target: the tables hold the run's
own figures, one Markdown row per arm."""

import dataclasses

import pytest

from cluster.suite import Suite
from cluster.unit_decoder import Unit, UnitDecoder
from harness.reports.markdown import markdown_table
from harness.reports.tables import Table
from harness.runs.run_dir import RunDir
from harness.runs.schema import group_id
from spotbench.cli import main
from tasks.registry import get_task

SUITE = Suite(
    models=("sdar-a",),
    proposers=("confidence", "oracle"),
    limit=2,
    temperatures=(0.0,),
    budgets=(0, 4),
    gen_length=32,
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> RunDir:
    run = RunDir.open(tmp_path_factory.mktemp("markdown") / "run", SUITE.config(), [0], split_sizes={"arith": 2})
    unit_decoder = UnitDecoder(SUITE)
    for sample in get_task("arith").load("test", limit=2):
        for rows in unit_decoder.decode(Unit(SUITE.models[0], "arith", (sample,), tuple(SUITE.groups()))):
            assert group_id(dataclasses.asdict(rows[0])) and run.write_group(rows)
    run.write_summary()
    run.update_manifest(status="complete", sessions=[{"loads": unit_decoder.loads}])
    return run


def section(page: str, title: str) -> list[list[str]]:
    """The cells of the table under `## title` (header first), split on unescaped pipes."""
    lines = page.split(f"## {title}\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines if not line.startswith("|---")]


def test_the_markdown_tables_hold_the_runs_figures(run_dir, capsys) -> None:
    assert main(["report", str(run_dir.path), "--markdown"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("# spotbench run run\n") and not (run_dir.path / "report.html").exists()
    summary = run_dir.read_summary().to_pylist()
    assert len(summary) == 4  # confidence and oracle at budgets 0 and 4
    accuracy = section(page, "Accuracy")
    head, rows = accuracy[0], {cells[0]: dict(zip(accuracy[0], cells)) for cells in accuracy[1:]}
    assert len(rows) == len(summary) and all(len(cells) == len(head) for cells in accuracy)
    for arm in summary:
        cells = rows[f"sdar-a/arith T=0 top1 batch {arm['batch_size']} {arm['proposer']}@{arm['budget']}"]
        assert float(cells["n"]) == arm["n"] == 2
        nfe = cells["speedup nfe (95% over prompts)"]
        assert float(nfe.split("x")[0]) == pytest.approx(arm["speedup_nfe"], abs=0.005)
        low, high = nfe.split("(")[1].rstrip(")").split("-")
        assert (float(low), float(high)) == pytest.approx(tuple(arm["speedup_nfe_ci95"]), abs=0.005)
        wall = cells["speedup wall (95% over prompts; robust, disturbed rows)"]
        assert float(wall.split("x")[0]) == pytest.approx(arm["speedup_wall"], abs=0.005)
        robust = wall.split("robust ")[1]
        assert float(robust.split("x")[0]) == pytest.approx(arm["speedup_wall_robust"], abs=0.005)
        assert robust.endswith(f"{arm['disturbed_rows']} of 2 disturbed")
        assert float(cells["accuracy (plain)"].rstrip("%")) == pytest.approx(100 * arm["accuracy"], abs=0.05)
    assert max(float(r["speedup nfe (95% over prompts)"].split("x")[0]) for r in rows.values()) > 1  # budget 4 drafts
    exactness = section(page, "Exactness")
    assert [cells[-1] for cells in exactness[1:]] == ["100.0%"] * len(summary)
    assert ["status", "complete"] in section(page, "Run")
    assert "## Throughput" in page and "## Model loads per worker" in page


def test_a_cell_with_a_pipe_stays_one_cell_and_an_empty_table_says_why() -> None:
    table = markdown_table(Table("t", ["a", "b"], [["x|y", "z"]]))
    assert table.splitlines()[3:] == ["|---|---|", "| x\\|y | z |"]
    assert markdown_table(Table("t", ["a"], [], empty="none here")) == "## t\n\nnone here\n"


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: p])
def test_a_path_that_is_not_a_run_is_one_line_exit_2(tmp_path, capsys, make) -> None:
    assert main(["report", str(make(tmp_path)), "--markdown"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "not a run directory" in err

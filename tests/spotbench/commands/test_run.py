from pathlib import Path

import pytest

from cluster.suite import Suite, build_suite, load_suite
from harness.errors import UserError
from harness.runs.run_dir import RunDir
from spotbench.cli import main

SUITES = Path(__file__).resolve().parents[3] / "suites"
SMALL = ["--models", "tiny-random:sdar", "--limit", "1", "--gen-length", "16", "--block-length", "8"]


def test_the_default_suite_file_is_the_embedded_default() -> None:
    assert build_suite(load_suite(SUITES / "default.yaml"), {}) == Suite()
    assert Suite().models == ("sdar-a",) and "spot" in Suite().proposers
    assert Suite().temperatures == (0.0, 1.0) and Suite().num_fewshot == 0


@pytest.mark.parametrize("path", sorted(SUITES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_suite_is_valid(path) -> None:
    suite = build_suite(load_suite(path), {})
    assert suite.num_fewshot == 0  # the zoo targets are trained zero-shot


def test_flags_override_the_file_and_lists_are_typed(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("models: tiny-random:llada\nbudgets: [1, 2]\ntemperatures: [0, 0.5]\nworkers: 3\n")
    suite = build_suite(load_suite(path), {"budgets": [4], "limit": None})
    assert suite.models == ("tiny-random:llada",) and suite.budgets == (4,)
    assert suite.temperatures == (0.0, 0.5) and suite.limit == Suite().limit
    assert "workers" not in suite.config() and suite.config()["budgets"] == [4]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--models", "nope"], "unknown model 'nope'"),
        (["--proposers", "spot9"], "unknown proposer 'spot9'"),
        (["--proposers", "spot:/no/such/checkpoint"], "no SPOT checkpoint in /no/such/checkpoint"),
        (["--proposers", "oracle:x"], "proposer 'oracle' takes no argument"),
        (["--tasks", "nope"], "unknown task 'nope'"),
        (["--rules", "median"], "unknown rule 'median'"),
        (["--budgets", "-1"], "--budgets must be a whole number >= 0 or auto, got -1"),
        (["--models", "tiny-random:llada", "--gen-length", "20"], "must be a multiple of block_length (8) for llada"),
        (["--address", "127.0.0.1:1"], "no Ray cluster at --address 127.0.0.1:1"),
        (["--address", "head-node"], "--address head-node is not host:port"),
        (["--models", "sdar-a", "--block-length", "16"], "sdar-a was trained at block length 32, not 16"),
        (
            ["--proposers", "spot", "--rules", "top1,threshold:0.9"],
            "under threshold:0.9 a pass commits a set: use spot-sets",
        ),
        (
            ["--models", "tiny-random-ar", "--proposers", "prompt-lookup", "--passes-only"],
            "--passes-only replays diffusion targets only and tiny-random-ar is autoregressive",
        ),
        (["--passes-only", "--replay-check", "0"], "--replay-check must be a whole number >= 1, got 0"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, message) -> None:
    out = tmp_path / "run"
    assert main(["run", *SMALL, "--output", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spotbench: error: ") and message in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("models: [sdar-a\n", "not valid YAML (line 2)"),
        ("- a list\n", "must be a mapping"),
        ("modles: [sdar-a]\n", "modles is an unknown setting"),
        ("limit: many\n", "limit must be a whole number >= 1, got many"),
        ("budgets: [true]\n", "budgets must be a whole number >= 0 or auto, got True"),
    ],
)
def test_a_malformed_suite_is_one_line_exit_2(tmp_path, capsys, text, message) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    assert main(["run", "--suite", str(path), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and not (tmp_path / "run").exists()


def test_an_output_directory_of_another_config_is_refused_untouched(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    suite = build_suite({}, {"models": ["tiny-random:sdar"], "limit": 2})
    RunDir.open(out, suite.config(), [0])
    before = (out / "manifest.json").read_text()
    assert main(["run", *SMALL, "--output", str(out)]) == 2
    assert "different config" in capsys.readouterr().err
    assert (out / "manifest.json").read_text() == before
    with pytest.raises(UserError, match="seeds must be"):
        build_suite({}, {"seeds": [2**64]})


def test_the_transfer_view_shows_learned_arms_against_the_best_baseline_and_the_oracle() -> None:
    import dataclasses

    import pyarrow as pa

    from cluster.unit_decoder import Unit, UnitDecoder
    from harness.runs.schema import ROW_SCHEMA
    from harness.runs.summary import summarize
    from spotbench.commands.run import TRANSFER_COLUMNS, render_summary
    from tasks.registry import get_task

    suite = build_suite(
        {},
        {
            "models": ["tiny-random:sdar"],
            "proposers": ["oracle", "confidence", "spot"],
            "limit": 2,
            "temperatures": [0.0],
            "budgets": [3],
            "gen_length": 16,
            "block_length": 8,
        },
    )
    unit_decoder = UnitDecoder(suite)
    rows = [
        dataclasses.asdict(r)
        for sample in get_task("arith").load("test", limit=2)
        for group in unit_decoder.decode(Unit("tiny-random:sdar", "arith", (sample,), tuple(suite.groups())))
        for r in group
    ]
    summary = summarize(pa.Table.from_pylist(rows, schema=ROW_SCHEMA)).to_pylist()
    header, *lines = render_summary(summary, TRANSFER_COLUMNS).splitlines()
    assert "vs best baseline" in header and "of oracle" in header and "trained on" in header
    spot = next(line for line in lines if " spot " in line)
    learned = next(r for r in summary if r["proposer"] == "spot")
    assert f"{learned['vs_best_baseline']:.3f}" in spot and "confidence" in spot and "sdar-a" in spot
    assert len(lines) == 3


@pytest.mark.slow  # a run on local Ray workers
def test_a_run_of_token_id_prompts_on_a_folder_without_tokenizer_completes_with_its_report(tmp_path, capsys) -> None:
    """`run --models DIR --tasks ids:FILE.jsonl` (docs/checkpoints.md): unscored rows, so no accuracy
    anywhere, and the report, results.json and the gate all take that."""
    import json
    import shutil

    from harness.targets.zoo import model_dir

    folder = tmp_path / "bare"  # a zoo checkpoint's config and weights, no tokenizer files
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model_dir("sdar-a") / name, folder)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("[5, 6, 7, 8]\n[9, 10, 11]\n")
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--models",
                str(folder),
                "--tasks",
                f"ids:{prompts}",
                "--proposers",
                "confidence",
                "--temperatures",
                "0",
                "--budgets",
                "4",
                "--gen-length",
                "16",
                "--block-length",
                "8",
                "--workers",
                "1",
                "--no-progress",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    stdout = capsys.readouterr().out
    assert (out / "report.html").is_file() and "digest " in stdout
    results = json.loads((out / "results.json").read_text())
    [arm] = results["results"].values()
    assert "exact_match,none" not in arm and arm["lossless,none"] == 1.0
    assert "Accuracy" in (out / "report.html").read_text()
    assert main(["verify", str(out)]) == 0
    assert main(["gate", str(out), "--baseline", str(out), "--all"]) == 0
    assert "not scored" in capsys.readouterr().out


@pytest.mark.slow  # two runs on local Ray workers
def test_a_passes_only_run_counts_a_full_runs_passes_and_verifies_reports_and_gates(tmp_path, capsys) -> None:
    """`run --passes-only --exact` on tiny-random:sdar: every row's pass counts are the full run's, the
    sample's rows are decoded (wall time, exactness), the rest replayed; verify, report and the gate
    take it, and a gate on wall time over it is refused in one line."""
    from harness.runs.run_dir import RunDir as Runs

    flags = [*SMALL, "--limit", "5", "--proposers", "confidence,oracle", "--budgets", "2,4", "--exact"]
    flags += ["--temperatures", "0,1", "--batch-size", "2", "--workers", "1", "--no-progress"]
    full, passes = tmp_path / "full", tmp_path / "passes"
    assert main(["run", *flags, "--output", str(full)]) == 0
    assert main(["run", *flags, "--passes-only", "--replay-check", "2", "--output", str(passes)]) == 0
    stdout = capsys.readouterr().out
    assert "replay: " in stdout and "(0 differ" in stdout and "floor <= 5%" in stdout
    key = ("proposer", "sample_id", "temperature", "budget")
    counts = ("plain_target_forwards", "spec_target_forwards", "spec_rows", "spec_commits", "correct")
    rows = {
        name: {tuple(r[k] for k in key): r for r in Runs.existing(path).read_rows().to_pylist()}
        for name, path in (("full", full), ("passes", passes))
    }
    assert rows["full"].keys() == rows["passes"].keys() and len(rows["full"]) == 5 * 2 * 2 * 2
    for k, row in rows["full"].items():
        assert [row[c] for c in counts] == [rows["passes"][k][c] for c in counts], k
    replayed = [r for r in rows["passes"].values() if r["replayed"]]
    assert 0 < len(replayed) < len(rows["passes"])
    summary = Runs.existing(passes).read_summary().to_pylist()
    assert all(s["replay_checked"] > 0 and s["replay_mismatches"] == 0 and s["exact_rate"] == 1.0 for s in summary)
    assert "Passes-only: replayed passes against the really decoded sample" in (passes / "report.html").read_text()
    assert "not a passes-only run" in (full / "report.html").read_text()
    assert main(["verify", str(passes)]) == 0
    assert main(["gate", str(passes), "--baseline", str(full), "--allow-config-diff"]) == 0
    capsys.readouterr()
    assert main(["gate", str(passes), "--baseline", str(full), "--allow-config-diff", "--wall-band", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--wall-band gates wall time" in err and "passes-only run" in err and "\n" not in err

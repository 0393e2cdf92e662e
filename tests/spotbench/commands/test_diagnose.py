import json

from spotbench.cli import main


def test_diagnose_reports_hit_rate_and_a_lossless_proposer(capsys) -> None:
    status = main(
        [
            "diagnose",
            "--model",
            "tiny-random:llada",
            "--task",
            "arith",
            "--limit",
            "2",
            "--gen-length",
            "16",
            "--block-length",
            "8",
            "--budget",
            "4",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    assert report["n"] == 2 and report["exact_rate"] == 1.0
    assert 0.0 <= report["stale_hit_rate"] <= 1.0
    assert report["mean_accept_len"] >= 1.0 and report["speedup_nfe"] == report["mean_accept_len"]
    assert len(report["samples"]) == 2


def test_diagnose_bad_input_is_one_line_exit_2(capsys) -> None:
    assert main(["diagnose", "--task", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spotbench: error: unknown task 'nope'") and "\n" not in err
    assert main(["diagnose", "--model", "tiny-random:llada", "--task", "arith", "--split", "dev"]) == 2
    assert "no split 'dev'" in capsys.readouterr().err


def test_diagnose_an_autoregressive_target(capsys) -> None:
    """An AR target decodes with its one rule (greedy), whatever the DLM --rule default says."""
    status = main(
        [
            "diagnose",
            "--model",
            "tiny-random-ar",
            "--task",
            "arith",
            "--limit",
            "2",
            "--gen-length",
            "8",
            "--proposer",
            "prompt-lookup",
            "--budget",
            "2",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["n"] == 2 and report["exact_rate"] == 1.0 and report["rule"] == "greedy"

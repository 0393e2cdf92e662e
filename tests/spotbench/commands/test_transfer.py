"""`spotbench transfer`: one row per arm, every arm lossless, SPOT rows name the training target."""

from __future__ import annotations

import json

import pytest
import torch

from spotbench.cli import main
from proposers.spot import SpotConfig, SpotNet, save_spot


def test_transfer_json_rows(tmp_path, capsys):
    torch.manual_seed(0)
    save_spot(SpotNet(SpotConfig(width=16, layers=1, heads=2, ffn=32)), tmp_path, {"provenance": {"target": "a"}})
    status = main(["transfer", "--proposer-checkpoint", str(tmp_path), "--targets",
                   "tiny-random:sdar,tiny-random:llada", "--limit", "2", "--budgets", "2,5",
                   "--temperatures", "0,1", "--gen-length", "16", "--block-length", "8", "--json"])
    assert status == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]  # the progress bar stays on stderr
    assert "transfer: 100%" in captured.err and "8/8" in captured.err  # targets x temperatures x prompts
    assert len(rows) == 2 * 2 * 2 * 4  # targets x temperatures x budgets x (3 baselines + spot)
    assert all(r["exact_rate"] == 1.0 and r["speedup_nfe"] >= 1.0 for r in rows)
    assert {r["train_target"] for r in rows if r["proposer"] == "spot"} == {"a"}
    assert {r["train_target"] for r in rows if r["proposer"] != "spot"} == {None}
    oracle = [r for r in rows if r["proposer"] == "oracle"]
    assert all(r["oracle_fraction"] == 1.0 for r in oracle)
    assert any(r["speedup_nfe"] > 1.5 for r in oracle)
    assert all(r["speedup_nfe_ci95"][0] <= r["speedup_nfe"] <= r["speedup_nfe_ci95"][1] for r in rows)
    for spot in (r for r in rows if r["proposer"] == "spot"):
        cell = {r["proposer"]: r["speedup_nfe"] for r in rows if all(
            r[k] == spot[k] for k in ("eval_target", "temperature", "budget"))}
        best = max(("confidence", "confidence-branch"), key=cell.__getitem__)
        assert spot["best_baseline"] == best
        assert spot["vs_best_baseline"] == pytest.approx(cell["spot"] / cell[best])
        low, high = spot["vs_best_baseline_ci95"]
        assert low <= high
    assert all(r["vs_best_baseline"] is None for r in rows if r["proposer"] != "spot")


def test_transfer_without_a_checkpoint_is_a_user_error(tmp_path, capsys):
    assert main(["transfer", "--proposer-checkpoint", str(tmp_path)]) == 2
    assert "no SPOT checkpoint" in capsys.readouterr().err


def test_transfer_rows_do_not_depend_on_workers(tmp_path, capsys):
    """Prompts decoded as Ray tasks give the rows that decoding them here gives, in the same order."""
    torch.manual_seed(0)
    save_spot(SpotNet(SpotConfig(width=16, layers=1, heads=2, ffn=32)), tmp_path, {"provenance": {"target": "a"}})
    command = ["transfer", "--proposer-checkpoint", str(tmp_path), "--targets", "tiny-random:sdar,tiny-random:dream",
               "--limit", "3", "--budgets", "3", "--temperatures", "0,1", "--gen-length", "16", "--block-length", "8",
               "--json"]
    outputs = []
    for workers in ("1", "2"):
        assert main([*command, "--workers", workers]) == 0
        outputs.append([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert len(outputs[0]) == 2 * 2 * 4 and outputs[0] == outputs[1]


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers must be at least 1, not 0"),
    (["--address", "127.0.0.1:1"], "no Ray cluster at --address 127.0.0.1:1"),
    (["--address", "head-node"], "--address head-node is not host:port"),
])
def test_bad_cluster_flags_are_one_line_errors_before_any_decoding(tmp_path, capsys, flags, message):
    save_spot(SpotNet(SpotConfig(width=16, layers=1, heads=2, ffn=32)), tmp_path, {"provenance": {"target": "a"}})
    assert main(["transfer", "--proposer-checkpoint", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotbench: error: ") and message in err and err.count("\n") == 1


def test_transfer_with_an_unknown_target_is_a_user_error_before_any_worker_starts(tmp_path, capsys):
    save_spot(SpotNet(SpotConfig(width=16, layers=1, heads=2, ffn=32)), tmp_path, {"provenance": {"target": "a"}})
    command = ["transfer", "--proposer-checkpoint", str(tmp_path), "--targets", "tiny-random:sdar,no-such-model"]
    assert main([*command, "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "unknown target 'no-such-model'" in err
    assert "transfer:" not in err  # no prompt was decoded: the error came before the progress bar

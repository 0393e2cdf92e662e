"""SPOT-Sets checkpoints and calibrations carry their rule and target: a checkpoint runs under its
tau on any model and a calibration under its own, and run, decode and calibrate refuse the others
before anything starts."""

from __future__ import annotations

import json
import re

import pytest

from harness.errors import UserError
from harness.pipeline import Arm
from harness.targets.registry import load_dlm_target
from proposers import build_proposer, check_arm_for_model, check_proposer
from proposers.spot_sets.network import CALIBRATION_FILE, Calibration, read_meta, save_spot_sets
from spotbench.cli import main


@pytest.fixture
def checkpoints(tmp_path, random_net):
    """A SPOT-Sets folder trained (so it says) on tiny-random:sdar at threshold:0.9, and a copy
    calibrated for tiny-random:llada at threshold:0.8."""
    trained = tmp_path / "trained"
    save_spot_sets(
        random_net(), trained, {"provenance": {"target": "tiny-random:sdar", "rule": "threshold:0.9", "tau": 0.9}}
    )
    calibrated = tmp_path / "calibrated"
    save_spot_sets(random_net(), calibrated, read_meta(trained))
    (calibrated / CALIBRATION_FILE).write_text(
        json.dumps(
            {
                "calibration": {"commit_scale": 1.5},
                "provenance": {"target": "tiny-random:llada", "rule": "threshold:0.8", "tau": 0.8},
            }
        )
    )
    return trained, calibrated


def test_a_checkpoint_runs_under_its_tau_on_any_model_and_a_calibration_under_its_own(checkpoints):
    trained, calibrated = (f"spot-sets:{folder}" for folder in checkpoints)
    assert check_proposer(trained) == Arm(trained, 0, "learned", "tiny-random:sdar")
    assert check_proposer(calibrated).trained_on == "tiny-random:sdar"  # trained there, calibrated elsewhere
    check_arm_for_model(trained, "tiny-random:sdar", 8, ["threshold:0.9"])
    check_arm_for_model(trained, "tiny-random:dream", 16, ["threshold:0.9"])  # transfer without calibration
    check_arm_for_model(calibrated, "tiny-random:llada", 8, ["threshold:0.8"])
    check_arm_for_model(trained, "tiny-random:sdar", 8)  # no rule named: nothing to refuse
    llada, sdar = (load_dlm_target(f"tiny-random:{family}").exact() for family in ("llada", "sdar"))
    assert build_proposer(calibrated, llada, None).calibration == Calibration(commit_scale=1.5)
    assert build_proposer(trained, sdar, None).calibration is None


@pytest.mark.parametrize(
    "which, model, rules, message",
    [
        (0, "tiny-random:sdar", ["top1"], "was trained for threshold:0.9; rule 'top1' commits one position per step"),
        (0, "tiny-random:sdar", ["threshold:0.9", "threshold:0.8"], "was trained for threshold:0.9, not threshold:0.8"),
        (1, "tiny-random:llada", ["threshold:0.9"], "was calibrated for threshold:0.8, not threshold:0.9"),
        (1, "tiny-random:llada", ["top1"], "was calibrated for threshold:0.8; rule 'top1'"),
        (
            1,
            "tiny-random:sdar",
            ["threshold:0.8"],
            "was calibrated for model 'tiny-random:llada', not 'tiny-random:sdar'",
        ),
    ],
)
def test_a_checkpoint_under_another_rule_or_a_calibration_on_another_model_is_refused(
    checkpoints, which, model, rules, message
):
    with pytest.raises(UserError, match=re.escape(message)):
        check_arm_for_model(f"spot-sets:{checkpoints[which]}", model, 8, rules)


def test_a_folder_without_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(UserError, match="no SPOT-Sets checkpoint in"):
        check_proposer(f"spot-sets:{tmp_path}")


@pytest.mark.parametrize(
    "rules, message",
    [
        ("top1", "commits one position per step"),
        ("threshold:0.9,threshold:0.5", "was trained for threshold:0.9, not threshold:0.5"),
    ],
)
def test_run_refuses_a_mismatched_rule_before_anything_starts(checkpoints, tmp_path, capsys, rules, message):
    out = tmp_path / "run"
    args = [
        "run",
        "--models",
        "tiny-random:sdar",
        "--proposers",
        f"confidence,spot-sets:{checkpoints[0]}",
        "--rules",
        rules,
        "--limit",
        "1",
        "--gen-length",
        "16",
        "--block-length",
        "8",
        "--output",
        str(out),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spotbench: error: ") and message in err and "\n" not in err
    assert not out.exists()


def test_run_refuses_a_calibration_for_another_model_before_anything_starts(checkpoints, tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "run",
        "--models",
        "tiny-random:sdar",
        "--proposers",
        f"confidence,spot-sets:{checkpoints[1]}",
        "--rules",
        "threshold:0.8",
        "--limit",
        "1",
        "--gen-length",
        "16",
        "--block-length",
        "8",
        "--output",
        str(out),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spotbench: error: ") and "\n" not in err
    assert "was calibrated for model 'tiny-random:llada', not 'tiny-random:sdar'" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "which, model, rule, message",
    [
        (0, "tiny-random:sdar", "top1", "commits one position per step"),
        (0, "tiny-random:sdar", "threshold:0.5", "was trained for threshold:0.9, not threshold:0.5"),
        (
            1,
            "tiny-random:sdar",
            "threshold:0.8",
            "was calibrated for model 'tiny-random:llada', not 'tiny-random:sdar'",
        ),
    ],
)
def test_decode_refuses_what_a_run_refuses(checkpoints, capsys, which, model, rule, message):
    args = [
        "decode",
        "--prompt",
        "1+1=",
        "--model",
        model,
        "--proposer",
        f"spot-sets:{checkpoints[which]}",
        "--rule",
        rule,
        "--gen-length",
        "16",
        "--block-length",
        "8",
    ]
    assert main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("spotbench: error: ") and message in err and "\n" not in err and not captured.out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tasks", "arith/test:3"], "calibration prompts must not come from a test split"),
        (["--tasks", "arith:30,gsm8k:21"], "at most 50 calibration prompts"),
        (["--rule", "top1"], "SPOT-Sets is calibrated for a threshold rule"),
    ],
)
def test_calibrate_refuses_test_splits_too_many_prompts_and_top1(checkpoints, tmp_path, capsys, args, message):
    out = tmp_path / "calibrated-copy"
    assert (
        main(
            [
                "calibrate-spot-sets",
                f"spot-sets:{checkpoints[0]}",
                "--model",
                "tiny-random:llada",
                "--out",
                str(out),
                *args,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("spotbench: error: ") and message in err and "\n" not in err
    assert not out.exists()


@pytest.mark.slow
def test_calibrate_writes_a_copy_with_its_calibration_and_provenance(checkpoints, tmp_path, capsys):
    args = [
        "--model",
        "tiny-random:llada",
        "--tasks",
        "arith:2",
        "--rule",
        "threshold:0.013",
        "--block-length",
        "8",
        "--gen-length",
        "16",
    ]
    for name in ("a", "b"):
        assert main(["calibrate-spot-sets", f"spot-sets:{checkpoints[0]}", "--out", str(tmp_path / name), *args]) == 0
    first, second = ((tmp_path / name / CALIBRATION_FILE).read_text() for name in ("a", "b"))
    assert first == second  # deterministic
    record = json.loads(first)
    assert {k: record["provenance"][k] for k in ("target", "rule", "tau", "prompts", "temperatures")} == {
        "target": "tiny-random:llada",
        "rule": "threshold:0.013",
        "tau": 0.013,
        "prompts": ["arith/train/0", "arith/train/1"],
        "temperatures": [0.0, 1.0],
    }
    assert record["provenance"]["checkpoint_provenance"]["target"] == "tiny-random:sdar"
    assert record["fit"]["after"]["loss"] < record["fit"]["before"]["loss"]
    assert (tmp_path / "a" / "spot_sets.safetensors").read_bytes() == (
        checkpoints[0] / "spot_sets.safetensors"
    ).read_bytes()
    check_arm_for_model(f"spot-sets:{tmp_path / 'a'}", "tiny-random:llada", 8, ["threshold:0.013"])
    assert main(["calibrate-spot-sets", "spot", "--model", "tiny-random:llada", "--out", str(tmp_path / "c")]) == 2
    assert "calibrates spot-sets checkpoints" in capsys.readouterr().err


def test_calibrate_is_the_old_name_of_calibrate_spot_sets_with_a_one_line_notice(checkpoints, tmp_path, capsys):
    args = [f"spot-sets:{checkpoints[0]}", "--model", "tiny-random:llada", "--rule", "top1", "--out", str(tmp_path)]
    assert main(["calibrate-spot-sets", *args]) == 2
    new = capsys.readouterr().err.strip()
    assert main(["calibrate", *args]) == 2
    notice, error = capsys.readouterr().err.strip().split("\n")
    assert notice == "spotbench: `calibrate` is now `calibrate-spot-sets`; the old name will be removed"
    assert error == new and "SPOT-Sets is calibrated for a threshold rule" in new and "\n" not in new

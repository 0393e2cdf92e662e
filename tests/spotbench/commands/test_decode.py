"""`spotbench decode`: both arms side by side, the verdict, and one-line errors for bad input."""

import json

import pytest

from spotbench.cli import main

SMALL = ["--gen-length", "16", "--block-length", "8"]


def test_json_has_both_arms_and_the_verdict(capsys, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("What is 2+2?\n\nName a colour.\n")
    status = main(
        [
            "decode",
            "--model",
            "tiny-random:llada",
            "--proposer",
            "oracle",
            "--budget",
            "3",
            "--temperature",
            "1.0",
            "--prompts",
            str(prompts),
            "--exact",
            "--json",
            *SMALL,
        ]
    )
    assert status == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt"] for r in results] == ["What is 2+2?", "Name a colour."]
    for r in results:
        assert r["exact"] is True and r["verdict"] == "exact" and r["divergence_step"] is None
        assert r["plain_nfe"] == 16 and r["spec_nfe"] == 4
        assert r["mean_accept_len"] == 4.0 and r["speedup_nfe"] == 4.0
        assert r["completion"] == r["spec_completion"] and r["correct"] is None  # no task, no score


def test_table_output(capsys):
    args = ["decode", "--model", "tiny-random:sdar", "--prompt", "hi", "--rule", "threshold:0.5", *SMALL]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "mean_accept_len" in out and "lossless: exact" in out and "speedup_nfe" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--budget", "-1"], "--budget"),
        (["--rule", "top3"], "unknown rule"),
        (["--proposer", "nope"], "unknown proposer"),
        (["--proposer", "confidence:x"], "takes no argument"),
        (["--proposer", "spot:/no/such/folder"], "no SPOT checkpoint in /no/such/folder"),
        (["--temperature", "inf"], "temperature"),
        (["--near-tie", "nan"], "--near-tie"),
        (["--temperature", "-1"], "temperature"),
        (
            ["--model", "tiny-random:llada", "--gen-length", "20", "--block-length", "8"],
            "must be a multiple of block_length (8) for llada targets",
        ),
        (["--model", "tiny-random:gpt"], "tiny-random:gpt"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, extra, message):
    assert main(["decode", "--prompt", "hi", *SMALL, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_block_causal_targets_take_any_gen_length(capsys):
    """Their blocks lie on the absolute grid (docs/checkpoints.md): decoding runs to the end of the
    block that holds the last asked-for position."""
    assert main(["decode", "--prompt", "hi", *SMALL, "--gen-length", "20", "--block-length", "8", "--json"]) == 0
    assert "exact" in capsys.readouterr().out


def test_missing_or_empty_prompts_file(capsys, tmp_path):
    assert main(["decode", "--prompts", str(tmp_path / "missing.txt")]) == 2
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    assert main(["decode", "--prompts", str(empty)]) == 2
    assert main(["decode", "--prompt", ""]) == 2
    assert capsys.readouterr().err.count("spotbench: error:") == 3


def test_the_whole_seed_range_decodes_and_seeds_above_2_63_differ(capsys):
    """Noise keys are uint64: the top seeds are neither an error nor seed 0's (or each other's) noise."""
    outputs = []
    for seed in (0, 2**63, 2**64 - 1):
        assert main(["decode", "--prompt", "hi", "--temperature", "1", "--seed", str(seed), "--json", *SMALL]) == 0
        outputs.append(json.loads(capsys.readouterr().out)["completion"])
    assert len(set(outputs)) == 3


@pytest.mark.slow  # loads SmolLM2
def test_a_target_decodes_at_its_trained_block_length_unless_a_study_asks(capsys):
    """sdar-smollm2 was trained at block length 4: without --block-length it decodes at 4; 8 is
    refused in one line, and decoded only with --untrained-block-length, which its row records."""
    common = ["decode", "--model", "sdar-smollm2", "--prompt", "2+2=", "--gen-length", "8", "--budget", "1", "--json"]
    assert main(common) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["block_length"] == 4 and row["block_length_trained"] is True and row["exact"] is True
    assert main([*common, "--block-length", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "trained at block length 4, not 8" in err and "\n" not in err
    assert main([*common, "--block-length", "8", "--untrained-block-length"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["block_length"] == 8 and row["block_length_trained"] is False

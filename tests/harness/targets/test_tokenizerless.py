"""Checkpoint folders without tokenizer files: described, decoded on token ids, mask/eos overridden,
and their weights still checked; bad ids are one line naming the flag."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from harness.decoding import DecodeConfig, parse_rule, plain_decode
from harness.errors import UserError
from harness.targets.registry import load_target
from harness.targets.zoo import model_dir
from spotbench.cli import main

SMALL = [
    "--gen-length",
    "16",
    "--block-length",
    "8",
    "--untrained-block-length",
    "--budget",
    "4",
    "--proposer",
    "confidence",
]


def bare_copy(tmp_path: Path, name: str = "sdar-a", drop_ids: bool = False) -> Path:
    """A zoo checkpoint's config and weights only (no tokenizer files), optionally without its ids."""
    folder = tmp_path / f"{name}-bare"
    folder.mkdir()
    shutil.copy(model_dir(name) / "model.safetensors", folder)
    config = json.loads((model_dir(name) / "config.json").read_text())
    if drop_ids:
        config.pop("mask_token_id")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_target_describes_a_folder_without_tokenizer(tmp_path, capsys):
    folder = bare_copy(tmp_path)
    assert main(["target", str(folder), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tokenizer"].startswith("none") and info["chat_template"] == "none"
    assert (info["mask_id"], info["eos_id"]) == (2, 1)  # from config.json
    assert main(["target", str(folder), "--json", "--mask-id", "7", "--eos-id", "8"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["mask_id"], info["eos_id"]) == (7, 8)


def test_a_missing_mask_id_names_the_flag(tmp_path, capsys):
    folder = bare_copy(tmp_path, drop_ids=True)  # the family default (151669) is beyond this vocabulary
    assert main(["target", str(folder)]) == 2
    err = error_line(capsys)
    assert "no mask token id" in err and err.rstrip().endswith("give it with --mask-id")
    with pytest.raises(UserError, match="no mask token id"):
        load_target(str(folder))
    assert main(["target", str(folder), "--mask-id", "2"]) == 0


def test_a_folder_missing_both_ids_names_both_and_says_it_has_no_tokenizer(tmp_path, capsys):
    folder = bare_copy(tmp_path, drop_ids=True)
    config = json.loads((folder / "config.json").read_text())
    config.pop("eos_token_id")
    (folder / "config.json").write_text(json.dumps(config))
    assert main(["target", str(folder)]) == 2
    err = error_line(capsys)
    assert (
        "no mask and no eos token id (config.json has no mask_token_id or eos_token_id and the folder has no "
        "tokenizer); give them with --mask-id and --eos-id"
    ) in err, err
    assert main(["target", str(folder), "--mask-id", "2"]) == 2  # one of them given: the other named alone
    assert (
        "no eos token id (config.json has no eos_token_id and the folder has no tokenizer); give it with --eos-id"
        in error_line(capsys)
    )
    assert main(["target", str(folder), "--mask-id", "2", "--eos-id", "1"]) == 0


def test_a_tokenizer_json_that_does_not_parse_is_one_line(tmp_path, capsys):
    folder = bare_copy(tmp_path)
    (folder / "tokenizer.json").write_text("{not json")
    assert main(["target", str(folder)]) == 2
    err = error_line(capsys)
    assert f"{folder}: no loadable tokenizer files (" in err and "fix or remove the tokenizer files" in err
    (folder / "tokenizer.json").unlink()  # control: without tokenizer files the folder loads
    assert main(["target", str(folder)]) == 0


@pytest.mark.parametrize("flag", ["--mask-id", "--eos-id"])
def test_an_id_outside_the_vocabulary_is_one_line(tmp_path, capsys, flag):
    folder = bare_copy(tmp_path)
    assert main(["target", str(folder), flag, "2048"]) == 2
    err = error_line(capsys)
    assert "not a token id of this target's vocabulary (0..2047)" in err and f"give {flag} below 2048" in err


def test_weights_are_checked_without_a_tokenizer(tmp_path, capsys):
    folder = bare_copy(tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors.pop("model.norm.weight")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    assert main(["target", str(folder)]) == 2
    assert "missing tensor model.norm.weight" in error_line(capsys)


def test_prompt_ids_decode_as_the_tokenized_text_does(tmp_path, capsys):
    """The same ids through a bare folder and through the zoo model with its tokenizer: same answer."""
    folder = bare_copy(tmp_path)
    tokenizer = load_target("sdar-a").tokenizer
    ids = tokenizer.encode("Q: 12+30=?\nA:", add_special_tokens=False)
    assert main(["decode", "--model", "sdar-a", "--prompt", "Q: 12+30=?\nA:", "--json", *SMALL]) == 0
    text_row = json.loads(capsys.readouterr().out)
    assert main(["decode", "--model", str(folder), "--prompt-ids", ",".join(map(str, ids)), "--json", *SMALL]) == 0
    ids_row = json.loads(capsys.readouterr().out)
    assert ids_row["plain_answer_ids"] == text_row["plain_answer_ids"] and ids_row["exact"]
    assert ids_row["prompt"] == " ".join(map(str, ids)) and ids_row["chat_template"] == "none"

    # the Python API takes ids and the override alike
    target = load_target(str(folder), mask_id=2)
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, 0.0, 0)
    assert plain_decode(target, ids, config).answer_ids == text_row["plain_answer_ids"]


def test_prompt_ids_file_and_its_errors(tmp_path, capsys):
    folder = bare_copy(tmp_path)
    good = tmp_path / "ids.jsonl"
    good.write_text("[5, 6, 7]\n\n[8, 9]\n")
    assert main(["decode", "--model", str(folder), "--prompt-ids-file", str(good), "--json", *SMALL]) == 0
    assert [json.loads(line)["prompt_tokens"] for line in capsys.readouterr().out.splitlines()] == [3, 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('[5, 6]\n[5, "x"]\n')
    cases = [
        (["--prompt-ids-file", str(bad)], f"{bad}:2 must be a non-empty list of token ids"),
        (["--prompt-ids", "5,x"], "--prompt-ids must be comma-separated token ids"),
        (["--prompt-ids", "5,4096"], "prompt token id 4096 is outside the target's vocabulary (0..2047)"),
        (["--prompt", "hi"], "has no tokenizer to encode text prompts; give token ids with --prompt-ids"),
    ]
    for flags, message in cases:
        assert main(["decode", "--model", str(folder), *flags, *SMALL]) == 2
        assert message in error_line(capsys)


def test_a_run_worker_decodes_an_ids_task(tmp_path):
    """`ids:FILE` as a run's task, the mask id from the suite: the worker's rows carry the ids as given
    and no score."""
    from cluster.suite import Suite
    from cluster.unit_decoder import Unit, UnitDecoder
    from tasks.registry import get_task

    folder = bare_copy(tmp_path, drop_ids=True)
    prompts = tmp_path / "ids.jsonl"
    prompts.write_text("[5, 6, 7, 8]\n")
    suite = Suite(
        models=(str(folder),),
        proposers=("confidence",),
        tasks=(f"ids:{prompts}",),
        budgets=(4,),
        temperatures=(0.0,),
        gen_length=16,
        block_length=8,
        limit=1,
        mask_id=2,
    )
    [sample] = get_task(f"ids:{prompts}").load()
    [[row]] = UnitDecoder(suite).decode(Unit(str(folder), f"ids:{prompts}", (sample,), ((0.0, "top1", 0),)))
    assert row.prompt_tokens == 4 and row.exact and row.correct is None and row.chat_template == "none"
    assert row.spec_nfe <= row.plain_nfe and row.plain_answer_ids == row.spec_answer_ids

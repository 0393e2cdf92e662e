"""Chat templates: applied by default when the tokenizer has one, switched off, with a system turn,
few-shot as turns, recorded in every row and in the suite's config; a broken template is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cluster.suite import Suite, build_suite
from harness.errors import UserError
from harness.targets.registry import load_target
from harness.targets.zoo import model_dir
from spotbench.cli import main
from tasks.base import prompt_ids
from tasks.chat import Chat
from tasks.registry import get_task

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
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
    "--json",
]


def with_template(tmp_path: Path, template: str) -> Path:
    """The zoo's sdar-a checkpoint with a chat template saved into its tokenizer files."""
    folder = tmp_path / "sdar-a-chat"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model_dir("sdar-a") / name, folder)
    tokenizer = load_target("sdar-a").tokenizer
    tokenizer.chat_template = template
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory) -> Path:
    return with_template(tmp_path_factory.mktemp("chat"), TEMPLATE)


def decode_row(capsys, *flags: str) -> dict:
    assert main(["decode", *flags, *SMALL]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_template_is_applied_by_default_and_recorded(chat_folder, capsys):
    row = decode_row(capsys, "--model", str(chat_folder), "--prompt", "2+3=")
    assert row["prompt"] == "<|user|>2+3=<|end|><|assistant|>" and row["exact"]
    assert row["chat_template"] == Chat(load_target(str(chat_folder)).tokenizer).label
    assert row["chat_template"].startswith("template:")

    off = decode_row(capsys, "--model", str(chat_folder), "--prompt", "2+3=", "--no-chat-template")
    assert off["prompt"] == "2+3=" and off["chat_template"] == "off"
    system = decode_row(capsys, "--model", str(chat_folder), "--prompt", "2+3=", "--system-prompt", "Be brief.")
    assert system["prompt"] == "<|system|>Be brief.<|end|><|user|>2+3=<|end|><|assistant|>"
    zoo = decode_row(capsys, "--model", "sdar-a", "--prompt", "2+3=")  # the zoo's tokenizers have none
    assert zoo["prompt"] == "2+3=" and zoo["chat_template"] == "none"


def test_a_template_that_fails_to_render_is_one_line(tmp_path, capsys):
    folder = with_template(tmp_path, "{{ raise_exception('roles must alternate') }}")
    assert main(["decode", "--model", str(folder), "--prompt", "hi", *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chat template failed to render" in err and "roles must alternate" in err
    assert "--no-chat-template" in err
    assert main(["decode", "--model", str(folder), "--prompt", "hi", "--no-chat-template", *SMALL]) == 0


def test_a_system_prompt_without_a_template_is_refused(capsys):
    assert main(["decode", "--model", "sdar-a", "--prompt", "hi", "--system-prompt", "x", *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--system-prompt needs a chat template" in err and "has no chat template" in err


def test_a_template_asked_for_is_applied_where_there_is_one_and_refused_where_there_is_none(chat_folder, capsys):
    row = decode_row(capsys, "--model", str(chat_folder), "--prompt", "2+3=", "--chat-template")
    assert row["chat_template"].startswith("template:")
    assert main(["decode", "--model", "sdar-a", "--prompt", "hi", "--chat-template", *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--chat-template needs a chat template, and target sdar-a has none" in err
    assert main(["decode", "--model", "sdar-a", "--prompt", "2+3=", *SMALL]) == 0  # not asked for: raw text
    capsys.readouterr()


@pytest.mark.parametrize("flag", [["--system-prompt", "S"], ["--chat-template"]])
def test_token_id_prompts_refuse_what_only_text_prompts_take(chat_folder, capsys, tmp_path, flag):
    """Token ids never go through a template: a system prompt or a template asked for is refused, on a
    target that has a template too (nothing would have been dropped silently had they been text)."""
    assert main(["decode", "--model", str(chat_folder), "--prompt-ids", "5,6,7", *flag, *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag[0]} is for text prompts, and --prompt-ids gives token ids" in err
    ids = tmp_path / "ids.jsonl"
    ids.write_text("[5, 6, 7]\n")
    out = tmp_path / "run"
    assert main(["run", "--models", str(chat_folder), "--tasks", f"ids:{ids}", "--output", str(out), *flag]) == 2
    assert f"{flag[0]} is for text prompts, and task ids:{ids} gives token ids" in capsys.readouterr().err
    assert not out.exists()
    assert main(["decode", "--model", str(chat_folder), "--prompt-ids", "5,6,7", *SMALL]) == 0  # control


def test_gsm8k_few_shot_becomes_turns(chat_folder):
    tokenizer = load_target(str(chat_folder)).tokenizer
    task = get_task("gsm8k", num_fewshot=2)
    sample = task.load("test", limit=1)[0]
    prompt = task.prompt(sample, Chat(tokenizer, system_prompt="S"))
    turns = prompt.split("<|end|>")
    assert turns[0] == "<|system|>S" and prompt.count("<|assistant|>") == 3  # two answers, then the open turn
    assert turns[1].startswith("<|user|>Solve the problem") and "Solve the problem" not in "".join(turns[2:])
    assert turns[2].startswith("<|assistant|> ") and "####" in turns[2]
    assert prompt.endswith(f"Question: {sample.question}\nAnswer:<|end|><|assistant|>")
    raw = task.prompt(sample, Chat(tokenizer, enabled=False))
    assert raw == task.prompt(sample) and raw.count("Question:") == 3 and "<|" not in raw
    assert prompt_ids(task, sample, Chat(tokenizer, enabled=False)) == tokenizer.encode(raw, add_special_tokens=False)


def test_the_suite_records_the_choice():
    config = Suite().config()
    assert config["chat_template"] is None and config["system_prompt"] is None  # None: when the tokenizer has one
    assert build_suite({}, {"chat_template": True}).config()["chat_template"] is True  # asked for
    suite = build_suite({"chat_template": False, "system_prompt": "S"}, {})
    assert suite.config()["chat_template"] is False and suite.config()["system_prompt"] == "S"
    with pytest.raises(UserError, match="--chat-template must be true or false, got maybe"):
        build_suite({}, {"chat_template": "maybe"})


def test_mbpp_few_shot_becomes_turns(chat_folder):
    tokenizer = load_target(str(chat_folder)).tokenizer
    task = get_task("mbpp")
    sample = task.load("test", limit=1)[0]
    prompt = task.prompt(sample, Chat(tokenizer))
    assert prompt.count("<|user|>") == 4 and prompt.count("<|assistant|>") == 4  # three examples, then the task
    assert prompt.endswith(f"<|user|>{sample.meta['question']}<|end|><|assistant|>[BEGIN]\n")
    raw = task.prompt(sample, Chat(tokenizer, enabled=False))
    assert raw == sample.meta["header"] + "[BEGIN]\n" and raw.count("[DONE]") == 3 and "<|" not in raw

"""Every malformed input to `decode` and `diagnose` is one clear line (exit 2, nothing written): the
same settings as `run`'s, through the same validators.

`CASES` maps a case id to (argv, a part of the one error line, files made in the empty folder first);
tests/spotbench/conftest.py checks each with the fixture `clear_error` and counts them in "malformed
inputs with clear errors X/X" after a run.
"""

from __future__ import annotations

import pytest

CASES = {
    # run flags
    "decode-dtype-unknown": (["decode", "--prompt", "hi", "--dtype", "int8"], "unknown dtype 'int8'"),
    # decode and diagnose: the same settings through the same validators
    "decode-temperature-inf": (["decode", "--prompt", "hi", "--temperature", "inf"], "--temperature must be a finite"),
    "decode-near-tie-nan": (["decode", "--prompt", "hi", "--near-tie", "nan"], "--near-tie must be a finite"),
    "decode-near-tie-negative": (["decode", "--prompt", "hi", "--near-tie", "-1"], "--near-tie must be a finite"),
    "decode-rule-tau-2": (["decode", "--prompt", "hi", "--rule", "threshold:2.0"], "tau outside (0, 1]"),
    "decode-seed-2**64": (["decode", "--prompt", "hi", "--seed", str(2**64)], "--seed must be a whole number in"),
    "decode-seed-negative": (["decode", "--prompt", "hi", "--seed", "-3"], "--seed must be a whole number in"),
    "decode-budget-text": (["decode", "--prompt", "hi", "--budget", "many"], "--budget must be a whole number"),
    "decode-gen-length-0": (["decode", "--prompt", "hi", "--gen-length", "0"], "--gen-length must be a whole number"),
    "decode-prompts-not-utf8": (["decode", "--prompts", "p.txt"], "not UTF-8", {"p.txt": b"\xff\xfe\n"}),
    "decode-prompt-ids-text": (["decode", "--prompt-ids", "1,two"], "--prompt-ids must be comma-separated token ids"),
    "decode-prompt-ids-file-line": (
        ["decode", "--prompt-ids-file", "ids.jsonl"],
        "ids.jsonl:2: not JSON",
        {"ids.jsonl": "[1, 2]\n[1, 2\n"},
    ),
    "decode-prompt-ids-outside-vocab": (["decode", "--prompt-ids", "1,99999999"], "outside the target's vocabulary"),
    "decode-mask-id-outside-vocab": (["decode", "--prompt", "hi", "--mask-id", "99999999"], "give --mask-id below"),
    "decode-mask-id-negative": (["decode", "--prompt", "hi", "--mask-id", "-1"], "--mask-id must be a token id"),
    "diagnose-limit-0": (["diagnose", "--model", "tiny-random:sdar", "--limit", "0"], "--limit must be a whole"),
    "diagnose-temperature-nan": (
        ["diagnose", "--model", "tiny-random:sdar", "--temperature", "nan"],
        "--temperature must be a finite",
    ),
    "diagnose-samples-negative": (
        ["diagnose", "--model", "tiny-random:sdar", "--samples", "-1"],
        "--samples must be a whole number >= 0",
    ),
    # what a worker would find only after Ray started: checked from configs and files first
    "decode-temperature-huge": (
        ["decode", "--prompt", "hi", "--temperature", "1e30"],
        "--temperature must be a finite number >= 0: 0 (greedy) or in [0.001, 1000]",
    ),
    # chat settings that would be dropped silently
    "decode-chat-template-without-template": (
        ["decode", "--model", "sdar-a", "--prompt", "hi", "--chat-template"],
        "--chat-template needs a chat template, and target sdar-a has none",
    ),
    "decode-prompt-ids-system-prompt": (
        ["decode", "--prompt-ids", "1,2", "--system-prompt", "x"],
        "--system-prompt is for text prompts, and --prompt-ids gives token ids",
    ),
    "decode-prompt-ids-chat-template": (
        ["decode", "--prompt-ids", "1,2", "--chat-template"],
        "--chat-template is for text prompts",
    ),
    "decode-prompt-ids-empty-item": (["decode", "--prompt-ids", "1,,2"], "(no empty item), got '1,,2'"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_malformed_input_is_one_clear_line(case, clear_error) -> None:
    clear_error(*case)

"""Every malformed input to `run` (its flags, suite files and targets) is one clear line: exit 2, one
stderr line `spotbench: error: ...` naming the problem and the fix, no traceback, and nothing written.
Only the validation is reached, so no model loads and no Ray starts; the other commands' malformed
inputs are in the other test_malformed_*.py files.

`CASES` maps a case id to (argv, a part of the one error line, files made in the empty folder first);
tests/spotbench/conftest.py checks each with the fixture `clear_error` and counts them in "malformed
inputs with clear errors X/X" after a run.
"""

from __future__ import annotations

import json
import shlex

import pytest

from harness.targets.zoo import model_dir

RUN = shlex.split("run --models tiny-random:sdar --limit 1 --gen-length 16 --block-length 8 --output out")
NOT_UTF8 = b"models: [caf\xe9]\n"
SDAR_CONFIG = json.loads((model_dir("sdar-a") / "config.json").read_text())
NO_IDS_CONFIG = json.dumps({k: v for k, v in SDAR_CONFIG.items() if k not in ("mask_token_id", "eos_token_id")})

CASES = {
    # suite files
    "suite-not-utf8": (["run", "--suite", "suite.yaml"], "not UTF-8", {"suite.yaml": NOT_UTF8}),
    "suite-missing": (["run", "--suite", "nope.yaml"], "cannot read suite nope.yaml"),
    "suite-bad-yaml": (["run", "--suite", "suite.yaml"], "not valid YAML (line 2)", {"suite.yaml": "models: [a\n"}),
    "suite-not-mapping": (["run", "--suite", "suite.yaml"], "must be a mapping", {"suite.yaml": "- a\n"}),
    "suite-unknown-setting": (
        ["run", "--suite", "suite.yaml"],
        "modles is an unknown setting",
        {"suite.yaml": "modles: [sdar-a]\n"},
    ),
    "suite-limit-text": (
        ["run", "--suite", "suite.yaml"],
        "limit must be a whole number >= 1, got many",
        {"suite.yaml": "limit: many\n"},
    ),
    "run-passes-only-autoregressive": (
        ["run", "--suite", "suite.yaml"],
        "--passes-only replays diffusion targets only and tiny-random-ar is autoregressive",
        {"suite.yaml": "models: [tiny-random-ar]\nproposers: [prompt-lookup]\npasses_only: true\n"},
    ),
    "run-batch-size-zero": ([*RUN, "--batch-size", "0"], "--batch-size must be a whole number >= 1, got 0"),
    "run-batch-size-negative": ([*RUN, "--batch-size", "-4"], "--batch-size must be a whole number >= 1, got -4"),
    "run-batch-size-fraction": ([*RUN, "--batch-size", "1.5"], "--batch-size must be a whole number >= 1"),
    "suite-batch-size-text": (
        ["run", "--suite", "suite.yaml"],
        "batch_sizes must be a whole number >= 1",
        {"suite.yaml": "batch_sizes: [many]\n"},
    ),
    "run-batch-size-beyond-memory": (
        [*RUN, "--batch-size", str(10**9)],
        "--batch-size 1000000000 on tiny-random:sdar needs about",
    ),
    "suite-budget-bool": (
        ["run", "--suite", "suite.yaml"],
        "budgets must be a whole number >= 0 or auto, got True",
        {"suite.yaml": "budgets: [true]\n"},
    ),
    "suite-seed-2**64": (
        ["run", "--suite", "suite.yaml"],
        "seeds must be a whole number in [0, 2**64)",
        {"suite.yaml": f"seeds: [{2**64}]\n"},
    ),
    "suite-temperature-inf": (
        ["run", "--suite", "suite.yaml"],
        "temperatures must be a finite number",
        {"suite.yaml": "temperatures: [.inf]\n"},
    ),
    "suite-empty-list": (
        ["run", "--suite", "suite.yaml"],
        "models must list at least one value",
        {"suite.yaml": "models: []\n"},
    ),
    "suite-split-number": (
        ["run", "--suite", "suite.yaml"],
        "split must be non-empty text",
        {"suite.yaml": "split: 3\n"},
    ),
    "suite-exact-word": (
        ["run", "--suite", "suite.yaml"],
        "exact must be true or false",
        {"suite.yaml": "exact: maybe\n"},
    ),
    "suite-rule-tau": (
        ["run", "--suite", "suite.yaml"],
        "tau outside (0, 1]",
        {"suite.yaml": "rules: ['threshold:2.0']\n"},
    ),
    # run flags
    "run-budgets-text": ([*RUN, "--budgets", "abc"], "--budgets must be a whole number >= 0 or auto, got abc"),
    "run-device-unknown": ([*RUN, "--device", "tpu"], "device 'tpu' is not auto, cpu, cuda or cuda:N"),
    "run-dtype-unknown": ([*RUN, "--dtype", "float8"], "dtype 'float8' is not auto, bfloat16"),
    "run-gpus-per-worker-0": ([*RUN, "--gpus-per-worker", "0"], "--gpus-per-worker must be a number of GPUs > 0"),
    "run-budgets-negative": ([*RUN, "--budgets", "-1"], "--budgets must be a whole number >= 0"),
    "run-budgets-twice": ([*RUN, "--budgets", "2,2"], "--budgets must list each value once"),
    "run-limit-0": ([*RUN, "--limit", "0"], "--limit must be a whole number >= 1, got 0"),
    "run-limit-text": ([*RUN, "--limit", "ten"], "--limit must be a whole number >= 1"),
    "run-temperature-nan": ([*RUN, "--temperatures", "nan"], "--temperatures must be a finite number >= 0"),
    "run-temperature-negative": ([*RUN, "--temperatures", "-0.5"], "--temperatures must be a finite number >= 0"),
    "run-rule-tau-2": ([*RUN, "--rules", "threshold:2.0"], "tau outside (0, 1]"),
    "run-rule-tau-0": ([*RUN, "--rules", "threshold:0"], "tau outside (0, 1]"),
    "run-rule-tau-nan": ([*RUN, "--rules", "threshold:nan"], "tau must be finite"),
    "run-rule-unknown": ([*RUN, "--rules", "median"], "unknown rule 'median'"),
    "run-seed-negative": ([*RUN, "--seeds", "-1"], "--seeds must be a whole number in [0, 2**64)"),
    "run-seed-2**64": ([*RUN, "--seeds", str(2**64)], "--seeds must be a whole number in [0, 2**64)"),
    "run-gen-length-not-multiple": (
        [*RUN, "--models", "tiny-random:llada", "--gen-length", "20"],
        "must be a multiple of block_length (8) for llada targets",
    ),
    "run-block-length-0": ([*RUN, "--block-length", "0"], "--block-length must be a whole number >= 1"),
    "run-workers-0": ([*RUN, "--workers", "0"], "--workers must be a whole number >= 1"),
    "run-fewshot-negative": ([*RUN, "--fewshot", "-1"], "--fewshot must be a whole number >= 0"),
    "run-unknown-model": ([*RUN, "--models", "nope"], "unknown model 'nope'"),
    "run-unknown-task": ([*RUN, "--tasks", "nope"], "unknown task 'nope'"),
    "run-unknown-split": ([*RUN, "--split", "dev"], "no split 'dev'"),
    "run-unknown-proposer": ([*RUN, "--proposers", "spot9"], "unknown proposer 'spot9'"),
    "run-model-folder-not-checkpoint": (
        [*RUN, "--models", "folder"],
        "not a checkpoint (no config.json)",
        {"folder/notes.txt": "not a model"},
    ),
    "run-model-config-not-json": (
        [*RUN, "--models", "folder"],
        "config.json is not readable JSON",
        {"folder/config.json": "{"},
    ),
    "run-model-unknown-family": (
        [*RUN, "--models", "folder"],
        "unknown target family",
        {"folder/config.json": '{"model_type": "no-such-family"}'},
    ),
    "run-model-no-weights": (
        [*RUN, "--models", "folder"],
        "has no model.safetensors",
        {"folder/config.json": '{"model_type": "llada"}'},
    ),
    # decode and diagnose: the same settings through the same validators
    "run-eos-id-text": ([*RUN, "--eos-id", "end"], "--eos-id must be a token id"),
    "run-ids-file-missing": ([*RUN, "--tasks", "ids:nope.jsonl"], "cannot read prompt ids file nope.jsonl"),
    "run-ids-file-malformed": (
        [*RUN, "--tasks", "ids:ids.jsonl"],
        "ids.jsonl:1 must be a non-empty list of token ids",
        {"ids.jsonl": "[]\n"},
    ),
    "run-text-task-without-tokenizer": (
        ["run", "--models", "bare", "--limit", "1", "--output", "out"],
        "model bare has no tokenizer files and task arith gives text prompts",
        {"bare/config.json": '{"model_type": "sdar"}', "bare/model.safetensors": ""},
    ),
    "run-chat-template-system-empty": ([*RUN, "--system-prompt", ""], "--system-prompt must be non-empty text"),
    # what a worker would find only after Ray started: checked from configs and files first
    "run-mask-id-outside-vocab": (
        [*RUN, "--mask-id", "99999"],
        "mask id 99999 is not a token id of this target's vocabulary (0..258); give --mask-id below 259",
    ),
    "run-ids-outside-vocab": (
        [*RUN, "--tasks", "ids:ids.jsonl"],
        "task ids:ids.jsonl: prompt 1 has token id 99999, outside the vocabulary of tiny-random:sdar",
        {"ids.jsonl": "[2, 99999]\n[1]\n"},
    ),
    "run-checkpoint-ids-outside-vocab": (
        ["run", "--models", "folder", "--tasks", "ids:ids.jsonl", "--output", "out"],
        "outside the vocabulary of folder (0..2047)",
        {"folder/config.json": json.dumps(SDAR_CONFIG), "folder/model.safetensors": "", "ids.jsonl": "[5, 2048]\n"},
    ),
    "run-mask-id-for-ar": (
        [*RUN, "--models", "ar-a", "--proposers", "prompt-lookup", "--mask-id", "3"],
        "--mask-id is for diffusion targets; ar-a is autoregressive",
    ),
    "run-checkpoint-without-ids": (
        ["run", "--models", "folder", "--tasks", "ids:ids.jsonl", "--output", "out"],
        (
            "no mask and no eos token id (config.json has no mask_token_id or eos_token_id "
            "and the folder has no tokenizer); give them with --mask-id and --eos-id"
        ),
        {"folder/config.json": NO_IDS_CONFIG, "folder/model.safetensors": "", "ids.jsonl": "[5, 6]\n"},
    ),
    "run-tokenizer-json-unparsable": (
        ["run", "--models", "folder", "--output", "out"],
        "folder: no loadable tokenizer files",
        {
            "folder/config.json": json.dumps(SDAR_CONFIG),
            "folder/model.safetensors": "",
            "folder/tokenizer.json": "{not json",
        },
    ),
    "target-tokenizer-json-unparsable": (
        ["target", "folder"],
        "folder: no loadable tokenizer files",
        {
            "folder/config.json": json.dumps(SDAR_CONFIG),
            "folder/model.safetensors": "",
            "folder/tokenizer.json": "{not json",
        },
    ),
    "run-output-under-a-file": ([*RUN, "--output", "afile/run"], "afile is a file, not a folder", {"afile": "x"}),
    "run-output-not-writable": ([*RUN, "--output", "/sys/spotbench-run"], "/sys is not writable"),
    "run-temperature-huge": (
        [*RUN, "--temperatures", "1e30"],
        "--temperatures must be a finite number >= 0: 0 (greedy) or in [0.001, 1000], got 1e30",
    ),
    "run-temperature-denormal": ([*RUN, "--temperatures", "5e-324"], "or in [0.001, 1000], got 5e-324"),
    # chat settings that would be dropped silently
    "run-ids-system-prompt": (
        [*RUN, "--tasks", "ids:ids.jsonl", "--system-prompt", "be brief"],
        "--system-prompt is for text prompts, and task ids:ids.jsonl gives token ids",
        {"ids.jsonl": "[1, 2]\n"},
    ),
    "run-ids-chat-template": (
        [*RUN, "--tasks", "ids:ids.jsonl", "--chat-template"],
        "--chat-template is for text prompts",
        {"ids.jsonl": "[1, 2]\n"},
    ),
    "run-chat-template-without-template": (
        [*RUN, "--chat-template"],
        "--chat-template needs a chat template, and target tiny-random:sdar has none",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_malformed_input_is_one_clear_line(case, clear_error) -> None:
    clear_error(*case)

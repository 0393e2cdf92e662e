"""Every malformed input is one clear line: exit 2, one stderr line `spotbench: error: ...` naming the
problem and the fix, no traceback, and nothing written (no run directory, checkpoint or output).

`CASES` is the list of malformed inputs; its length is the count in "malformed inputs with clear
errors X/X" (tests/spotbench/conftest.py prints it after a run of this file). Each case runs the CLI
in this process in an empty folder; only the validation is reached, so no model loads and no Ray starts.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.targets.zoo import model_dir
from spotbench.cli import main

GSM8K_ROW = '{"question": "What is 1+1?", "answer": "1+1=2\\n#### 2"}\n'
RUN = [
    "run",
    "--models",
    "tiny-random:sdar",
    "--limit",
    "1",
    "--gen-length",
    "16",
    "--block-length",
    "8",
    "--output",
    "out",
]
TARGET_RECIPE = (
    "name: t\nfamily: sdar\ntasks: [arith]\noptimizer: {steps: 2}\n"
    "model: {hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2, num_kv_heads: 1, "
    "head_dim: 16}\n"
)
SPOT_RECIPE = (
    "name: t\ntarget: tiny-random:sdar\ntasks: {arith: 2}\noptimizer: {steps: 2}\n"
    "model: {width: 16, layers: 1, heads: 2, ffn: 32}\n"
)
NOT_UTF8 = b"models: [caf\xe9]\n"
SDAR_CONFIG = json.loads((model_dir("sdar-a") / "config.json").read_text())
NO_IDS_CONFIG = json.dumps({k: v for k, v in SDAR_CONFIG.items() if k not in ("mask_token_id", "eos_token_id")})


@dataclass(frozen=True)
class Case:
    argv: list[str]
    message: str
    """A part of the one line that names the problem."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Files made in the empty folder first (data files under data/, the data dir)."""


def foreign_parquet() -> bytes:
    """A valid Parquet file of another tool."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"a": [1, 2]}), sink)
    return sink.getvalue().to_pybytes()


def replaced(name: str, text: str) -> dict[str, str | bytes]:
    """A recipe with the line of one setting replaced (or added)."""
    base = TARGET_RECIPE if name == "target" else SPOT_RECIPE
    key = text.split(":", 1)[0]
    lines = [line for line in base.splitlines() if not line.startswith(key + ":")]
    return {"recipe.yaml": "\n".join(lines + [text]) + "\n"}


CASES = {
    # suite files
    "suite-not-utf8": Case(["run", "--suite", "suite.yaml"], "not UTF-8", {"suite.yaml": NOT_UTF8}),
    "suite-missing": Case(["run", "--suite", "nope.yaml"], "cannot read suite nope.yaml"),
    "suite-bad-yaml": Case(["run", "--suite", "suite.yaml"], "not valid YAML (line 2)", {"suite.yaml": "models: [a\n"}),
    "suite-not-mapping": Case(["run", "--suite", "suite.yaml"], "must be a mapping", {"suite.yaml": "- a\n"}),
    "suite-unknown-setting": Case(
        ["run", "--suite", "suite.yaml"], "modles is an unknown setting", {"suite.yaml": "modles: [sdar-a]\n"}
    ),
    "suite-limit-text": Case(
        ["run", "--suite", "suite.yaml"], "limit must be a whole number >= 1, got many", {"suite.yaml": "limit: many\n"}
    ),
    "run-passes-only-autoregressive": Case(
        ["run", "--suite", "suite.yaml"],
        "--passes-only replays diffusion targets only and tiny-random-ar is autoregressive",
        {"suite.yaml": "models: [tiny-random-ar]\nproposers: [prompt-lookup]\npasses_only: true\n"},
    ),
    "run-batch-size-zero": Case([*RUN, "--batch-size", "0"], "--batch-size must be a whole number >= 1, got 0"),
    "run-batch-size-negative": Case([*RUN, "--batch-size", "-4"], "--batch-size must be a whole number >= 1, got -4"),
    "run-batch-size-fraction": Case([*RUN, "--batch-size", "1.5"], "--batch-size must be a whole number >= 1"),
    "suite-batch-size-text": Case(
        ["run", "--suite", "suite.yaml"],
        "batch_sizes must be a whole number >= 1",
        {"suite.yaml": "batch_sizes: [many]\n"},
    ),
    "run-batch-size-beyond-memory": Case(
        [*RUN, "--batch-size", str(10**9)], "--batch-size 1000000000 on tiny-random:sdar needs about"
    ),
    "suite-budget-bool": Case(
        ["run", "--suite", "suite.yaml"],
        "budgets must be a whole number >= 0 or auto, got True",
        {"suite.yaml": "budgets: [true]\n"},
    ),
    "suite-seed-2**64": Case(
        ["run", "--suite", "suite.yaml"],
        "seeds must be a whole number in [0, 2**64)",
        {"suite.yaml": f"seeds: [{2**64}]\n"},
    ),
    "suite-temperature-inf": Case(
        ["run", "--suite", "suite.yaml"],
        "temperatures must be a finite number",
        {"suite.yaml": "temperatures: [.inf]\n"},
    ),
    "suite-empty-list": Case(
        ["run", "--suite", "suite.yaml"], "models must list at least one value", {"suite.yaml": "models: []\n"}
    ),
    "suite-split-number": Case(
        ["run", "--suite", "suite.yaml"], "split must be non-empty text", {"suite.yaml": "split: 3\n"}
    ),
    "suite-exact-word": Case(
        ["run", "--suite", "suite.yaml"], "exact must be true or false", {"suite.yaml": "exact: maybe\n"}
    ),
    "suite-rule-tau": Case(
        ["run", "--suite", "suite.yaml"], "tau outside (0, 1]", {"suite.yaml": "rules: ['threshold:2.0']\n"}
    ),
    # run flags
    "run-budgets-text": Case([*RUN, "--budgets", "abc"], "--budgets must be a whole number >= 0 or auto, got abc"),
    "run-device-unknown": Case([*RUN, "--device", "tpu"], "device 'tpu' is not auto, cpu, cuda or cuda:N"),
    "run-dtype-unknown": Case([*RUN, "--dtype", "float8"], "dtype 'float8' is not auto, bfloat16"),
    "run-gpus-per-worker-0": Case([*RUN, "--gpus-per-worker", "0"], "--gpus-per-worker must be a number of GPUs > 0"),
    "decode-dtype-unknown": Case(["decode", "--prompt", "hi", "--dtype", "int8"], "unknown dtype 'int8'"),
    "run-budgets-negative": Case([*RUN, "--budgets", "-1"], "--budgets must be a whole number >= 0"),
    "run-budgets-twice": Case([*RUN, "--budgets", "2,2"], "--budgets must list each value once"),
    "run-limit-0": Case([*RUN, "--limit", "0"], "--limit must be a whole number >= 1, got 0"),
    "run-limit-text": Case([*RUN, "--limit", "ten"], "--limit must be a whole number >= 1"),
    "run-temperature-nan": Case([*RUN, "--temperatures", "nan"], "--temperatures must be a finite number >= 0"),
    "run-temperature-negative": Case([*RUN, "--temperatures", "-0.5"], "--temperatures must be a finite number >= 0"),
    "run-rule-tau-2": Case([*RUN, "--rules", "threshold:2.0"], "tau outside (0, 1]"),
    "run-rule-tau-0": Case([*RUN, "--rules", "threshold:0"], "tau outside (0, 1]"),
    "run-rule-tau-nan": Case([*RUN, "--rules", "threshold:nan"], "tau must be finite"),
    "run-rule-unknown": Case([*RUN, "--rules", "median"], "unknown rule 'median'"),
    "run-seed-negative": Case([*RUN, "--seeds", "-1"], "--seeds must be a whole number in [0, 2**64)"),
    "run-seed-2**64": Case([*RUN, "--seeds", str(2**64)], "--seeds must be a whole number in [0, 2**64)"),
    "run-gen-length-not-multiple": Case(
        [*RUN, "--models", "tiny-random:llada", "--gen-length", "20"],
        "must be a multiple of block_length (8) for llada targets",
    ),
    "run-block-length-0": Case([*RUN, "--block-length", "0"], "--block-length must be a whole number >= 1"),
    "run-workers-0": Case([*RUN, "--workers", "0"], "--workers must be a whole number >= 1"),
    "run-fewshot-negative": Case([*RUN, "--fewshot", "-1"], "--fewshot must be a whole number >= 0"),
    "run-unknown-model": Case([*RUN, "--models", "nope"], "unknown model 'nope'"),
    "run-unknown-task": Case([*RUN, "--tasks", "nope"], "unknown task 'nope'"),
    "run-unknown-split": Case([*RUN, "--split", "dev"], "no split 'dev'"),
    "run-unknown-proposer": Case([*RUN, "--proposers", "spot9"], "unknown proposer 'spot9'"),
    "run-model-folder-not-checkpoint": Case(
        [*RUN, "--models", "folder"], "not a checkpoint (no config.json)", {"folder/notes.txt": "not a model"}
    ),
    "run-model-config-not-json": Case(
        [*RUN, "--models", "folder"], "config.json is not readable JSON", {"folder/config.json": "{"}
    ),
    "run-model-unknown-family": Case(
        [*RUN, "--models", "folder"],
        "unknown target family",
        {"folder/config.json": '{"model_type": "no-such-family"}'},
    ),
    "run-model-no-weights": Case(
        [*RUN, "--models", "folder"], "has no model.safetensors", {"folder/config.json": '{"model_type": "llada"}'}
    ),
    # data files, read by `run` and by `tasks check` (SPOTBENCH_DATA_DIR is ./data)
    "run-data-truncated": Case(
        [*RUN, "--tasks", "gsm8k"], "line 2 is not JSON", {"data/gsm8k_test.jsonl": GSM8K_ROW + GSM8K_ROW[:20]}
    ),
    "run-data-missing-field": Case(
        [*RUN, "--tasks", "math500"],
        "line 1 has no solution",
        {
            "data/math500_test.jsonl": '{"problem": "1+1", "unique_id": "a", "answer": "2", '
            '"subject": "x", "level": 1}\n'
        },
    ),
    "check-data-truncated": Case(
        ["tasks", "check", "gsm8k"], "line 2 is not JSON", {"data/gsm8k_test.jsonl": GSM8K_ROW + GSM8K_ROW[:20]}
    ),
    "check-data-empty": Case(["tasks", "check", "gsm8k"], "has no rows", {"data/gsm8k_test.jsonl": ""}),
    "check-data-not-json": Case(
        ["tasks", "check", "gsm8k"], "line 1 is not JSON", {"data/gsm8k_test.jsonl": "question,answer\n"}
    ),
    "check-data-not-object": Case(
        ["tasks", "check", "gsm8k"], "line 1 is not a JSON object", {"data/gsm8k_test.jsonl": "[1, 2]\n"}
    ),
    "check-data-missing-field": Case(
        ["tasks", "check", "gsm8k"], "line 1 has no answer", {"data/gsm8k_test.jsonl": '{"question": "What is 1+1?"}\n'}
    ),
    "check-data-not-utf8": Case(["tasks", "check", "gsm8k"], "not UTF-8", {"data/gsm8k_test.jsonl": b"\xff\xfe{\n"}),
    "check-data-gzip-truncated": Case(
        ["tasks", "check", "humaneval"],
        "truncated",
        {"data/HumanEval.jsonl.gz": gzip.compress(GSM8K_ROW.encode() * 50)[:60]},
    ),
    "check-data-not-gzip": Case(
        ["tasks", "check", "humaneval"], "cannot be read", {"data/HumanEval.jsonl.gz": GSM8K_ROW}
    ),
    "check-limit-0": Case(["tasks", "check", "arith", "--limit", "0"], "--limit must be a whole number >= 1, got 0"),
    "check-limit-text": Case(["tasks", "check", "arith", "--limit", "all"], "--limit must be a whole number >= 1"),
    "check-unknown-task": Case(["tasks", "check", "nope"], "unknown task 'nope'"),
    # decode and diagnose: the same settings through the same validators
    "decode-temperature-inf": Case(
        ["decode", "--prompt", "hi", "--temperature", "inf"], "--temperature must be a finite"
    ),
    "decode-near-tie-nan": Case(["decode", "--prompt", "hi", "--near-tie", "nan"], "--near-tie must be a finite"),
    "decode-near-tie-negative": Case(["decode", "--prompt", "hi", "--near-tie", "-1"], "--near-tie must be a finite"),
    "decode-rule-tau-2": Case(["decode", "--prompt", "hi", "--rule", "threshold:2.0"], "tau outside (0, 1]"),
    "decode-seed-2**64": Case(["decode", "--prompt", "hi", "--seed", str(2**64)], "--seed must be a whole number in"),
    "decode-seed-negative": Case(["decode", "--prompt", "hi", "--seed", "-3"], "--seed must be a whole number in"),
    "decode-budget-text": Case(["decode", "--prompt", "hi", "--budget", "many"], "--budget must be a whole number"),
    "decode-gen-length-0": Case(
        ["decode", "--prompt", "hi", "--gen-length", "0"], "--gen-length must be a whole number"
    ),
    "decode-prompts-not-utf8": Case(["decode", "--prompts", "p.txt"], "not UTF-8", {"p.txt": b"\xff\xfe\n"}),
    "decode-prompt-ids-text": Case(
        ["decode", "--prompt-ids", "1,two"], "--prompt-ids must be comma-separated token ids"
    ),
    "decode-prompt-ids-file-line": Case(
        ["decode", "--prompt-ids-file", "ids.jsonl"], "ids.jsonl:2: not JSON", {"ids.jsonl": "[1, 2]\n[1, 2\n"}
    ),
    "decode-prompt-ids-outside-vocab": Case(
        ["decode", "--prompt-ids", "1,99999999"], "outside the target's vocabulary"
    ),
    "decode-mask-id-outside-vocab": Case(["decode", "--prompt", "hi", "--mask-id", "99999999"], "give --mask-id below"),
    "decode-mask-id-negative": Case(["decode", "--prompt", "hi", "--mask-id", "-1"], "--mask-id must be a token id"),
    "run-eos-id-text": Case([*RUN, "--eos-id", "end"], "--eos-id must be a token id"),
    "run-ids-file-missing": Case([*RUN, "--tasks", "ids:nope.jsonl"], "cannot read prompt ids file nope.jsonl"),
    "run-ids-file-malformed": Case(
        [*RUN, "--tasks", "ids:ids.jsonl"], "ids.jsonl:1 must be a non-empty list of token ids", {"ids.jsonl": "[]\n"}
    ),
    "run-text-task-without-tokenizer": Case(
        ["run", "--models", "bare", "--limit", "1", "--output", "out"],
        "model bare has no tokenizer files and task arith gives text prompts",
        {"bare/config.json": '{"model_type": "sdar"}', "bare/model.safetensors": ""},
    ),
    "run-chat-template-system-empty": Case([*RUN, "--system-prompt", ""], "--system-prompt must be non-empty text"),
    "diagnose-limit-0": Case(["diagnose", "--model", "tiny-random:sdar", "--limit", "0"], "--limit must be a whole"),
    "diagnose-temperature-nan": Case(
        ["diagnose", "--model", "tiny-random:sdar", "--temperature", "nan"], "--temperature must be a finite"
    ),
    "diagnose-samples-negative": Case(
        ["diagnose", "--model", "tiny-random:sdar", "--samples", "-1"], "--samples must be a whole number >= 0"
    ),
    # train-target recipes
    "target-recipe-not-utf8": Case(
        ["train-target", "recipe.yaml", "--out", "out"], "not UTF-8", {"recipe.yaml": NOT_UTF8}
    ),
    "target-recipe-missing": Case(["train-target", "nope.yaml", "--out", "out"], "cannot read recipe"),
    "target-steps-flag-negative": Case(
        ["train-target", "recipe.yaml", "--out", "out", "--steps", "-5"],
        "--steps must be a whole number >= 1, got -5",
        {"recipe.yaml": TARGET_RECIPE},
    ),
    "target-steps-flag-0": Case(
        ["train-target", "recipe.yaml", "--out", "out", "--steps", "0"],
        "--steps must be a whole number >= 1, got 0",
        {"recipe.yaml": TARGET_RECIPE},
    ),
    "target-steps-text": Case(
        ["train-target", "recipe.yaml", "--out", "out"],
        "optimizer: steps must be a whole number >= 1",
        replaced("target", "optimizer: {steps: many}"),
    ),
    "target-learning-rate-text": Case(
        ["train-target", "recipe.yaml", "--out", "out"],
        "optimizer: learning_rate must be a finite number > 0",
        replaced("target", "optimizer: {learning_rate: fast}"),
    ),
    "target-batch-size-0": Case(
        ["train-target", "recipe.yaml", "--out", "out"],
        "optimizer: batch_size must be a whole number >= 1",
        replaced("target", "optimizer: {batch_size: 0}"),
    ),
    "target-tasks-not-list": Case(
        ["train-target", "recipe.yaml", "--out", "out"], "tasks must be a list", replaced("target", "tasks: arith")
    ),
    "target-model-value-type": Case(
        ["train-target", "recipe.yaml", "--out", "out"],
        "hidden_size must be int, got big",
        replaced("target", "model: {hidden_size: big}"),
    ),
    "target-model-unknown-key": Case(
        ["train-target", "recipe.yaml", "--out", "out"],
        "width is not a setting here",
        replaced("target", "model: {width: 16}"),
    ),
    "target-missing-key": Case(
        ["train-target", "recipe.yaml", "--out", "out"],
        "family is missing",
        {"recipe.yaml": TARGET_RECIPE.replace("family: sdar\n", "")},
    ),
    "target-unknown-key": Case(
        ["train-target", "recipe.yaml", "--out", "out"], "stepz is an unknown setting", replaced("target", "stepz: 3")
    ),
    # train-proposer recipes
    "spot-recipe-not-utf8": Case(
        ["train-proposer", "recipe.yaml", "--out", "out"], "not UTF-8", {"recipe.yaml": NOT_UTF8}
    ),
    "spot-steps-flag-negative": Case(
        ["train-proposer", "recipe.yaml", "--out", "out", "--steps", "-5"],
        "--steps must be a whole number >= 1",
        {"recipe.yaml": SPOT_RECIPE},
    ),
    "spot-temperatures-text": Case(
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "temperatures must be a finite number >= 0: 0 (greedy) or in [0.001, 1000], got abc",
        replaced("spot", "temperatures: abc"),
    ),
    "spot-tasks-count-text": Case(
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "must be a whole number >= 1, got many",
        replaced("spot", "tasks: {arith: many}"),
    ),
    "spot-model-value-type": Case(
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "width must be int, got wide",
        replaced("spot", "model: {width: wide}"),
    ),
    "spot-depth-decay-range": Case(
        ["train-proposer", "recipe.yaml", "--out", "out"],
        "depth_decay must be in (0, 1]",
        replaced("spot", "depth_decay: 2"),
    ),
    "spot-workers-0": Case(
        ["train-proposer", "recipe.yaml", "--out", "out", "--workers", "0"],
        "--workers must be a whole number >= 1",
        {"recipe.yaml": SPOT_RECIPE},
    ),
    # gate thresholds (checked before either run is read)
    "gate-accept-fraction-nan": Case(
        ["gate", "run", "--baseline", "run", "--accept-fraction", "nan"],
        "--accept-fraction must be a finite number in [0, 1]",
    ),
    "gate-accept-fraction-above-1": Case(
        ["gate", "run", "--baseline", "run", "--accept-fraction", "1.5"],
        "--accept-fraction must be a finite number in [0, 1]",
    ),
    "gate-z-negative": Case(["gate", "run", "--baseline", "run", "--z", "-3"], "--z must be a finite number >= 0"),
    "gate-band-negative": Case(["gate", "run", "--baseline", "run", "--nfe-band", "-0.1"], "--nfe-band must be"),
    "gate-wall-band-inf": Case(["gate", "run", "--baseline", "run", "--wall-band", "inf"], "--wall-band must be"),
    # run stores given to gate and report (their checks: harness/gate.py, harness/runs/verify.py)
    "gate-foreign-parquet": Case(
        ["gate", "other.parquet", "--baseline", "other.parquet"], "other.parquet", {"other.parquet": foreign_parquet()}
    ),
    "gate-corrupt-parquet": Case(
        ["gate", "summary.parquet", "--baseline", "summary.parquet"],
        "summary.parquet",
        {"summary.parquet": b"PAR1" + b"\0" * 64},
    ),
    "report-not-a-run": Case(["report", "folder"], "not a run directory", {"folder/notes.txt": "x"}),
    "gate-baseline-digest-not-hex": Case(
        ["gate", "run", "--baseline", "run", "--baseline-digest", "abc"], "--baseline-digest 'abc' is not a digest"
    ),
    # what a worker would find only after Ray started: checked from configs and files first
    "run-mask-id-outside-vocab": Case(
        [*RUN, "--mask-id", "99999"],
        "mask id 99999 is not a token id of this target's vocabulary (0..258); give --mask-id below 259",
    ),
    "run-ids-outside-vocab": Case(
        [*RUN, "--tasks", "ids:ids.jsonl"],
        "task ids:ids.jsonl: prompt 1 has token id 99999, outside the vocabulary of tiny-random:sdar",
        {"ids.jsonl": "[2, 99999]\n[1]\n"},
    ),
    "run-checkpoint-ids-outside-vocab": Case(
        ["run", "--models", "folder", "--tasks", "ids:ids.jsonl", "--output", "out"],
        "outside the vocabulary of folder (0..2047)",
        {"folder/config.json": json.dumps(SDAR_CONFIG), "folder/model.safetensors": "", "ids.jsonl": "[5, 2048]\n"},
    ),
    "run-mask-id-for-ar": Case(
        [*RUN, "--models", "ar-a", "--proposers", "prompt-lookup", "--mask-id", "3"],
        "--mask-id is for diffusion targets; ar-a is autoregressive",
    ),
    "run-checkpoint-without-ids": Case(
        ["run", "--models", "folder", "--tasks", "ids:ids.jsonl", "--output", "out"],
        "no mask and no eos token id (config.json has no mask_token_id or eos_token_id "
        "and the folder has no tokenizer); give them with --mask-id and --eos-id",
        {"folder/config.json": NO_IDS_CONFIG, "folder/model.safetensors": "", "ids.jsonl": "[5, 6]\n"},
    ),
    "run-tokenizer-json-unparsable": Case(
        ["run", "--models", "folder", "--output", "out"],
        "folder: no loadable tokenizer files",
        {
            "folder/config.json": json.dumps(SDAR_CONFIG),
            "folder/model.safetensors": "",
            "folder/tokenizer.json": "{not json",
        },
    ),
    "target-tokenizer-json-unparsable": Case(
        ["target", "folder"],
        "folder: no loadable tokenizer files",
        {
            "folder/config.json": json.dumps(SDAR_CONFIG),
            "folder/model.safetensors": "",
            "folder/tokenizer.json": "{not json",
        },
    ),
    "run-output-under-a-file": Case([*RUN, "--output", "afile/run"], "afile is a file, not a folder", {"afile": "x"}),
    "run-output-not-writable": Case([*RUN, "--output", "/sys/spotbench-run"], "/sys is not writable"),
    "run-temperature-huge": Case(
        [*RUN, "--temperatures", "1e30"],
        "--temperatures must be a finite number >= 0: 0 (greedy) or in [0.001, 1000], got 1e30",
    ),
    "run-temperature-denormal": Case([*RUN, "--temperatures", "5e-324"], "or in [0.001, 1000], got 5e-324"),
    "decode-temperature-huge": Case(
        ["decode", "--prompt", "hi", "--temperature", "1e30"],
        "--temperature must be a finite number >= 0: 0 (greedy) or in [0.001, 1000]",
    ),
    "run-data-answer-int": Case(
        [*RUN, "--tasks", "gsm8k"],
        "gsm8k_test.jsonl row 1: question and answer must be text",
        {"data/gsm8k_test.jsonl": '{"question": "What is 1+1?", "answer": 2}\n'},
    ),
    "run-data-answer-without-marker": Case(
        [*RUN, "--tasks", "gsm8k"],
        "the answer ending in '#### <number>'",
        {"data/gsm8k_test.jsonl": '{"question": "What is 1+1?", "answer": "2"}\n'},
    ),
    # chat settings that would be dropped silently
    "run-ids-system-prompt": Case(
        [*RUN, "--tasks", "ids:ids.jsonl", "--system-prompt", "be brief"],
        "--system-prompt is for text prompts, and task ids:ids.jsonl gives token ids",
        {"ids.jsonl": "[1, 2]\n"},
    ),
    "run-ids-chat-template": Case(
        [*RUN, "--tasks", "ids:ids.jsonl", "--chat-template"],
        "--chat-template is for text prompts",
        {"ids.jsonl": "[1, 2]\n"},
    ),
    "run-chat-template-without-template": Case(
        [*RUN, "--chat-template"], "--chat-template needs a chat template, and target tiny-random:sdar has none"
    ),
    "decode-chat-template-without-template": Case(
        ["decode", "--model", "sdar-a", "--prompt", "hi", "--chat-template"],
        "--chat-template needs a chat template, and target sdar-a has none",
    ),
    "decode-prompt-ids-system-prompt": Case(
        ["decode", "--prompt-ids", "1,2", "--system-prompt", "x"],
        "--system-prompt is for text prompts, and --prompt-ids gives token ids",
    ),
    "decode-prompt-ids-chat-template": Case(
        ["decode", "--prompt-ids", "1,2", "--chat-template"], "--chat-template is for text prompts"
    ),
    "decode-prompt-ids-empty-item": Case(["decode", "--prompt-ids", "1,,2"], "(no empty item), got '1,,2'"),
}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_malformed_input_is_one_clear_line(case: Case, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPOTBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, content in case.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        getattr(tmp_path / name, "write_bytes" if isinstance(content, bytes) else "write_text")(content)
    before = snapshot(tmp_path)
    assert main(case.argv) == 2
    _out, err = capsys.readouterr()
    assert err.startswith("spotbench: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert case.message in err, err
    assert snapshot(tmp_path) == before  # nothing written: no run directory, checkpoint or output


@pytest.mark.parametrize(
    "name, flag, value, line",
    [
        ("budgets", "--budgets", "abc", "budgets: [abc]"),
        ("seeds", "--seeds", "-1", "seeds: [-1]"),
        ("seeds", "--seeds", str(2**64), f"seeds: [{2**64}]"),
        ("temperatures", "--temperatures", "nan", "temperatures: [.nan]"),
        ("rules", "--rules", "threshold:2.0", "rules: ['threshold:2.0']"),
        ("limit", "--limit", "0", "limit: 0"),
        ("batch_sizes", "--batch-size", "0", "batch_sizes: [0]"),
        ("replay_check", "--replay-check", "0", "replay_check: 0"),
        ("workers", "--workers", "0", "workers: 0"),
        ("steps", "--steps", "-5", "optimizer: {steps: -5}"),
    ],
)
def test_a_flag_and_a_file_line_give_the_same_message(name, flag, value, line, tmp_path, monkeypatch, capsys) -> None:
    """One validator per setting: only the named source differs (the flag, or the file and key)."""
    monkeypatch.chdir(tmp_path)
    if name == "steps":
        Path("recipe.yaml").write_text(TARGET_RECIPE.replace("optimizer: {steps: 2}", line))
        Path("good.yaml").write_text(TARGET_RECIPE)
        from_file, from_flag = (
            ["train-target", "recipe.yaml", "--out", "out"],
            ["train-target", "good.yaml", "--out", "out", flag, value],
        )
        where = "recipe recipe.yaml: optimizer"  # a setting of the recipe's optimizer block
    else:
        Path("suite.yaml").write_text(line + "\n")
        from_file, from_flag = ["run", "--suite", "suite.yaml"], [*RUN, flag, value]
        where = "suite suite.yaml"
    assert main(from_file) == 2 and main(from_flag) == 2
    file_error, flag_error = capsys.readouterr().err.splitlines()
    assert file_error.startswith(f"spotbench: error: {where}: {name}")
    assert flag_error.startswith(f"spotbench: error: {flag}")
    assert file_error.removeprefix(f"spotbench: error: {where}: {name}") == flag_error.removeprefix(
        f"spotbench: error: {flag}"
    )

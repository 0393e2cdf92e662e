"""Every malformed data file (read by `run` and by `tasks check`), gate threshold and run store given
to `gate` or `report` is one clear line (exit 2, nothing written).

`CASES` maps a case id to (argv, a part of the one error line, files made in the empty folder first);
tests/spotbench/conftest.py checks each with the fixture `clear_error` and counts them in "malformed
inputs with clear errors X/X" after a run.
"""

from __future__ import annotations

import gzip
import shlex

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

RUN = shlex.split("run --models tiny-random:sdar --limit 1 --gen-length 16 --block-length 8 --output out")
GSM8K_ROW = '{"question": "What is 1+1?", "answer": "1+1=2\\n#### 2"}\n'


def foreign_parquet() -> bytes:
    """A valid Parquet file of another tool."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"a": [1, 2]}), sink)
    return sink.getvalue().to_pybytes()


CASES = {
    # data files, read by `run` and by `tasks check` (SPOTBENCH_DATA_DIR is ./data)
    "run-data-truncated": (
        [*RUN, "--tasks", "gsm8k"],
        "line 2 is not JSON",
        {"data/gsm8k_test.jsonl": GSM8K_ROW + GSM8K_ROW[:20]},
    ),
    "run-data-missing-field": (
        [*RUN, "--tasks", "math500"],
        "line 1 has no solution",
        {
            "data/math500_test.jsonl": '{"problem": "1+1", "unique_id": "a", "answer": "2", '
            '"subject": "x", "level": 1}\n'
        },
    ),
    "check-data-truncated": (
        ["tasks", "check", "gsm8k"],
        "line 2 is not JSON",
        {"data/gsm8k_test.jsonl": GSM8K_ROW + GSM8K_ROW[:20]},
    ),
    "check-data-empty": (["tasks", "check", "gsm8k"], "has no rows", {"data/gsm8k_test.jsonl": ""}),
    "check-data-not-json": (
        ["tasks", "check", "gsm8k"],
        "line 1 is not JSON",
        {"data/gsm8k_test.jsonl": "question,answer\n"},
    ),
    "check-data-not-object": (
        ["tasks", "check", "gsm8k"],
        "line 1 is not a JSON object",
        {"data/gsm8k_test.jsonl": "[1, 2]\n"},
    ),
    "check-data-missing-field": (
        ["tasks", "check", "gsm8k"],
        "line 1 has no answer",
        {"data/gsm8k_test.jsonl": '{"question": "What is 1+1?"}\n'},
    ),
    "check-data-not-utf8": (["tasks", "check", "gsm8k"], "not UTF-8", {"data/gsm8k_test.jsonl": b"\xff\xfe{\n"}),
    "check-data-gzip-truncated": (
        ["tasks", "check", "humaneval"],
        "truncated",
        {"data/HumanEval.jsonl.gz": gzip.compress(GSM8K_ROW.encode() * 50)[:60]},
    ),
    "check-data-not-gzip": (["tasks", "check", "humaneval"], "cannot be read", {"data/HumanEval.jsonl.gz": GSM8K_ROW}),
    "check-limit-0": (["tasks", "check", "arith", "--limit", "0"], "--limit must be a whole number >= 1, got 0"),
    "check-limit-text": (["tasks", "check", "arith", "--limit", "all"], "--limit must be a whole number >= 1"),
    "check-unknown-task": (["tasks", "check", "nope"], "unknown task 'nope'"),
    # gate thresholds (checked before either run is read)
    "gate-accept-fraction-nan": (
        ["gate", "run", "--baseline", "run", "--accept-fraction", "nan"],
        "--accept-fraction must be a finite number in [0, 1]",
    ),
    "gate-accept-fraction-above-1": (
        ["gate", "run", "--baseline", "run", "--accept-fraction", "1.5"],
        "--accept-fraction must be a finite number in [0, 1]",
    ),
    "gate-z-negative": (["gate", "run", "--baseline", "run", "--z", "-3"], "--z must be a finite number >= 0"),
    "gate-band-negative": (["gate", "run", "--baseline", "run", "--nfe-band", "-0.1"], "--nfe-band must be"),
    "gate-wall-band-inf": (["gate", "run", "--baseline", "run", "--wall-band", "inf"], "--wall-band must be"),
    # run stores given to gate and report (their checks: harness/gate.py, harness/runs/verify.py)
    "gate-foreign-parquet": (
        ["gate", "other.parquet", "--baseline", "other.parquet"],
        "other.parquet",
        {"other.parquet": foreign_parquet()},
    ),
    "gate-corrupt-parquet": (
        ["gate", "summary.parquet", "--baseline", "summary.parquet"],
        "summary.parquet",
        {"summary.parquet": b"PAR1" + b"\0" * 64},
    ),
    "report-not-a-run": (["report", "folder"], "not a run directory", {"folder/notes.txt": "x"}),
    "gate-baseline-digest-not-hex": (
        ["gate", "run", "--baseline", "run", "--baseline-digest", "abc"],
        "--baseline-digest 'abc' is not a digest",
    ),
    # what a worker would find only after Ray started: checked from configs and files first
    "run-data-answer-int": (
        [*RUN, "--tasks", "gsm8k"],
        "gsm8k_test.jsonl row 1: question and answer must be text",
        {"data/gsm8k_test.jsonl": '{"question": "What is 1+1?", "answer": 2}\n'},
    ),
    "run-data-answer-without-marker": (
        [*RUN, "--tasks", "gsm8k"],
        "the answer ending in '#### <number>'",
        {"data/gsm8k_test.jsonl": '{"question": "What is 1+1?", "answer": "2"}\n'},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_malformed_input_is_one_clear_line(case, clear_error) -> None:
    clear_error(*case)

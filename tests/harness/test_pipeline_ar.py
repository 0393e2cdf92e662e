"""AR targets through the one arm pipeline, the suite and `spotbench decode`: one typed row per arm
with rule `greedy`, tokens-per-forward accounting, and one-line refusals of the wrong proposer kind."""

from __future__ import annotations

import functools
import json

import pytest

from cluster.suite import Suite, build_suite
from harness.errors import UserError
from harness.pipeline import Arm, Group, decode_group
from harness.targets.ar import ARTarget
from harness.targets.registry import load_ar_only
from proposers import build_proposer
from spotbench.cli import main


@functools.cache
def exact_tiny() -> ARTarget:
    return load_ar_only("tiny-random-ar").exact()


def group(rule: str = "greedy", temperature: float = 1.0) -> Group:
    ids = tuple(b"the cat sat on the mat; the cat sat on the")
    return Group("tiny-random-ar", "prompt", "0", ids, temperature, rule, 4, 24, 8)


def test_rows_of_an_ar_group():
    arms = [Arm("oracle", 3, "oracle"), Arm("prompt-lookup", 0), Arm("prompt-lookup", 4)]
    rows = decode_group(exact_tiny(), group(), arms, build_proposer, None, True, 1e-9)
    assert [(r.proposer, r.budget) for r in rows] == [("oracle", 3), ("prompt-lookup", 0), ("prompt-lookup", 4)]
    for row in rows:
        assert row.rule == "greedy" and row.exact and row.verdict == "exact"
        assert row.plain_nfe == row.plain_rows == row.plain_commits == 24 and row.stale_hit_rate is None
        assert row.spec_commits == 24 and row.spec_rows == row.spec_nfe + row.draft_nodes
        assert row.mean_accept_len == 24 / row.spec_nfe and row.speedup_nfe == 24 / row.spec_nfe
        assert sum(row.accepted_per_depth) == 24 - row.spec_nfe and row.stops_position == 0
        assert row.spec_completion == row.completion
    oracle, plain, _lookup = rows
    assert oracle.spec_nfe == 6 and oracle.accepted_per_depth == [6, 6, 6]
    assert plain.spec_nfe == 24 and plain.stops_no_draft == 24


def test_an_ar_group_with_a_commit_rule_is_a_bug():
    with pytest.raises(ValueError, match="greedy"):
        decode_group(exact_tiny(), group("top1"), [Arm("oracle", 2)], build_proposer, None, True, 1e-9)


def test_suite_groups_and_validation():
    suite = Suite(
        models=("tiny-random-ar", "tiny-random:sdar"),
        proposers=("oracle",),
        rules=("top1", "threshold:0.9"),
        temperatures=(0.0, 1.0),
    )
    assert suite.groups("tiny-random-ar") == [(0.0, "greedy", 0), (1.0, "greedy", 0)]
    assert suite.groups("tiny-random:sdar") == suite.groups() and len(suite.groups()) == 4
    with pytest.raises(UserError, match="'confidence' drafts for diffusion"):
        build_suite({}, {"models": "tiny-random-ar", "proposers": "oracle,confidence"})
    with pytest.raises(UserError, match="tiny-random-ar:SEED"):
        build_suite({}, {"models": "tiny-random-ar:x", "proposers": "oracle"})


def test_spotbench_decode_on_an_ar_target(capsys):
    status = main(
        [
            "decode",
            "--model",
            "tiny-random-ar",
            "--proposer",
            "prompt-lookup",
            "--budget",
            "4",
            "--prompt",
            "the cat sat on the mat; the cat sat on the",
            "--gen-length",
            "32",
            "--exact",
            "--json",
        ]
    )
    assert status == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["rule"] == "greedy" and row["exact"] and row["plain_nfe"] == 32 and row["spec_commits"] == 32
    assert main(["decode", "--model", "tiny-random-ar", "--prompt", "hi"]) == 2
    assert "drafts for diffusion (DLM) targets" in capsys.readouterr().err

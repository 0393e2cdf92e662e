"""Spiffy: pattern names round-trip, calibration counts what plain decoding committed, the proposer
is exact under both rules, a calibrated graph saves passes where a wrong one saves none, and a graph
is refused for another model or block length before anything runs."""

from __future__ import annotations

import functools
import json
from collections import Counter

import pytest
import torch

from harness.bundled import ZOO_DIR
from harness.decoding import DecodeConfig, DraftRequest, NoiseSource, parse_rule, plain_decode, speculative_decode
from harness.decoding.replay import replay
from harness.errors import UserError
from harness.lossless import check_lossless, near_tie_tolerance
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from proposers import build_proposer, check_arm_for_model, check_proposer
from proposers.baselines.confidence import ConfidenceProposer
from proposers.spiffy.draft_graph import (
    DraftGraph,
    SpiffyCalibration,
    SpiffyProposer,
    StaleView,
    calibrate,
    count_patterns,
)
from spotbench.cli import main
from tasks.base import prompt_ids
from tasks.registry import get_task

PROMPTS = [list(b"Q: 2+2=?\nA:"), list(b"hi"), list(b"The quick brown fox")]
FAMILIES = ["llada", "dream", "sdar", "llada2"]
RULES = {"top1": "top1", "threshold": "threshold:0.02"}


@functools.cache
def exact_target(family: str) -> DLMTarget:
    return load_dlm_target(f"tiny-random:{family}").exact()


@functools.cache
def tiny_calibration(family: str, rule: str) -> SpiffyCalibration:
    target = exact_target(family)
    graphs = calibrate(target, PROMPTS[:2], parse_rule(rule, target.family, target.mask_id), [0.0, 1.0], 16, 8, 12, 5)
    return SpiffyCalibration({"target": f"tiny-random:{family}", "block_length": 8}, graphs)


def request(target: DLMTarget, rule: str, temperature: float, budget: int) -> DraftRequest:
    rule_ = parse_rule(rule, target.family, target.mask_id)
    root = torch.full((8,), target.mask_id)
    root[2] = 65
    stale = target.start(PROMPTS[0], 8, 8).forward(root[None]).current[0]
    noise = NoiseSource(0, 8, target.vocab_size) if temperature > 0 else None
    return DraftRequest(stale, root, 3, noise, rule_, temperature, budget)


def chain(depth: int) -> SpiffyCalibration:
    patterns = tuple(((0, 0),) * d for d in range(1, depth + 1))
    return SpiffyCalibration({}, {0.0: DraftGraph(patterns, (1,) * depth, 1)})


@pytest.mark.parametrize("rule", RULES.values())
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_names_round_trip_and_rank_zero_is_the_rule_on_the_stale_view(rule, temperature):
    target = exact_target("llada")
    req = request(target, rule, temperature, 8)
    noise = req.noise(req.step) if req.noise else None
    view = StaleView(req.stale, req.root, noise, temperature, req.rule)
    assert view.transition((0, 0)) == req.rule(req.stale, req.root, noise, temperature)
    assert sorted(view.order) == [p for p in range(8) if p != 2] and view.transition((7, 0)) is None
    names = set()
    for element in [(i, j) for i in range(7) for j in range(4)]:
        transition = view.transition(element)
        name = view.name(transition)
        assert view.transition(name) == transition
        names.add(name)
        if req.rule.tau is None:
            assert name == element and transition.positions == (view.order[element[0]],)
    assert len(names) > 7  # under threshold, elements re-tokening a member coincide only when they name one set


@pytest.mark.parametrize("rule", RULES.values())
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [1, 3, 6])
def test_a_graph_of_rank_zero_chains_is_the_confidence_proposer(rule, temperature, budget):
    target = exact_target("dream")
    req = request(target, rule, temperature, budget)
    assert SpiffyProposer(chain(16)).propose(req) == ConfidenceProposer().propose(req)


def wrong_ranks(calibration: SpiffyCalibration) -> SpiffyCalibration:
    """The same graph drafting token rank j + 40: tokens a target practically never commits."""
    graphs = {
        t: DraftGraph(tuple(tuple((i, j + 40) for i, j in p) for p in g.patterns), g.counts, g.roots)
        for t, g in calibration.graphs.items()
    }
    return SpiffyCalibration(calibration.provenance, graphs)


@pytest.mark.parametrize("family", ["llada", "sdar"])
@pytest.mark.parametrize("rule", RULES.values())
def test_calibration_counts_the_patterns_plain_decoding_committed(family, rule) -> None:
    target = exact_target(family)
    cfg = DecodeConfig(parse_rule(rule, target.family, target.mask_id), 16, 8, 1.0, 4)
    plain = plain_decode(target, PROMPTS[0], cfg, keep_logits=True)
    counts: Counter = Counter()
    roots = count_patterns(plain, cfg, counts, max_depth=4)
    assert roots > 0 and counts
    assert all(counts[p[:-1]] >= c for p, c in counts.items() if len(p) > 1)  # a prefix counts with its extensions
    assert sum(c for p, c in counts.items() if len(p) == 1) <= roots and max(map(len, counts)) <= 4
    graph = DraftGraph.from_counts(counts, roots, 5)
    assert all(p[:-1] in graph.patterns for p in graph.patterns if len(p) > 1)  # prefix-closed
    assert list(graph.counts) == sorted(graph.counts, reverse=True)
    # counted patterns were the truth, so drafting them saves passes; the same graph with wrong tokens saves none
    calibration = SpiffyCalibration({}, {1.0: graph})
    assert replay(plain, SpiffyProposer(calibration), cfg, 5).metrics.nfe < plain.metrics.nfe
    assert replay(plain, SpiffyProposer(wrong_ranks(calibration)), cfg, 5).metrics.nfe == plain.metrics.nfe


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", RULES)
@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("budget", [2, 12])
def test_spiffy_is_exact_in_exactness_mode(family, kind, temperature, budget):
    """The property of tests/harness/decoding/test_speculative.py, with a graph calibrated on the target."""
    target = exact_target(family)
    proposer = SpiffyProposer(tiny_calibration(family, RULES[kind]))
    for seed, prompt in enumerate(PROMPTS):
        cfg = DecodeConfig(parse_rule(RULES[kind], target.family, target.mask_id), 16, 8, temperature, seed)
        plain = plain_decode(target, prompt, cfg)
        spec = speculative_decode(target, prompt, proposer, cfg, budget)
        assert check_lossless(plain, spec, near_tie_tolerance(torch.float64)).exact
        assert spec.steps == plain.steps and torch.equal(spec.tokens, plain.tokens)
        assert spec.metrics.nfe <= plain.metrics.nfe and spec.metrics.draft_nodes <= budget * spec.metrics.nfe


@functools.cache
def sdar_a_plains(temperature: float) -> tuple:
    target = load_dlm_target("sdar-a")
    task = get_task("gsm8k", num_fewshot=0)
    rule = parse_rule("top1", target.family, target.mask_id)
    configs = [DecodeConfig(rule, 64, 32, temperature, i) for i in range(3)]
    plains = [
        plain_decode(target, prompt_ids(task, s, target.tokenizer), c, keep_logits=True)
        for s, c in zip(task.load("test", limit=3), configs)
    ]
    return plains, configs


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_zoo_graph_saves_passes_on_sdar_a_and_a_wrong_one_saves_none(temperature):
    plains, configs = sdar_a_plains(temperature)
    zoo = build_proposer("spiffy", None, None)
    plain_nfe = sum(p.metrics.nfe for p in plains)

    def nfe(proposer, budget):
        return sum(replay(p, proposer, c, budget).metrics.nfe for p, c in zip(plains, configs))

    assert plain_nfe / nfe(zoo, 8) > 1.5
    assert nfe(zoo, 8) <= nfe(ConfidenceProposer(), 8)
    assert nfe(SpiffyProposer(wrong_ranks(zoo.calibration)), 8) == plain_nfe


def test_registry_spiffy_is_the_zoo_calibration_for_sdar_a(tmp_path):
    arm = check_proposer("spiffy")
    assert (arm.kind, arm.trained_on) == ("baseline", "sdar-a")
    by_name = build_proposer("spiffy:spiffy-sdar-a", None, None)
    assert by_name.calibration is build_proposer("spiffy", None, None).calibration  # read once
    provenance = build_proposer("spiffy", None, None).calibration.provenance
    assert provenance["block_length"] == 32 and provenance["rule"] == "top1"
    assert all("/train/" in name for name in provenance["prompts"]) and len(provenance["prompts"]) == 50
    with pytest.raises(UserError, match="no Spiffy graph in /no/such"):
        check_proposer("spiffy:/no/such")
    (tmp_path / "spiffy.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(UserError, match="is not a Spiffy graph file"):
        check_proposer(f"spiffy:{tmp_path}")


def test_committed_graphs_are_for_the_target_and_rule_their_folder_names():
    """zoo/proposers/spiffy-<target> (top1) and spiffy-<target>-threshold-0.9, on train prompts, at the
    target's block length (32 for the zoo's own targets, 4 and 16 for the converted sdar-smollm2 and
    sdar-smollm2-b16)."""
    block_lengths = {"sdar-smollm2": 4, "sdar-smollm2-b16": 16}
    folders = sorted(ZOO_DIR.joinpath("proposers").glob("spiffy-*"))
    assert {"spiffy-sdar-a", "spiffy-sdar-b", "spiffy-llada-a", "spiffy-dream-a"} <= {f.name for f in folders}
    for folder in folders:
        provenance = build_proposer(f"spiffy:{folder.name}", None, None).calibration.provenance
        model, _, rule = folder.name.removeprefix("spiffy-").partition("-threshold-")
        assert (provenance["target"], provenance["rule"]) == (model, f"threshold:{rule}" if rule else "top1")
        block_length = block_lengths.get(model, 32)
        assert provenance["block_length"] == block_length and all("/train/" in p for p in provenance["prompts"])
        check_arm_for_model(f"spiffy:{folder.name}", model, block_length)


def test_a_graph_for_another_model_or_block_length_is_refused():
    check_arm_for_model("spiffy", "sdar-a", 32)
    check_arm_for_model("spot", "sdar-b", 16)  # SPOT transfers: no check
    with pytest.raises(UserError, match="calibrated for model 'sdar-a', not 'sdar-b'"):
        check_arm_for_model("spiffy", "sdar-b", 32)
    with pytest.raises(UserError, match="calibrated at block length 32, not 16"):
        check_arm_for_model("spiffy:spiffy-sdar-a", "sdar-a", 16)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--models", "sdar-b"], "spiffy was calibrated for model 'sdar-a', not 'sdar-b'"),
        (
            ["--block-length", "16", "--untrained-block-length", "--gen-length", "32"],
            "spiffy was calibrated at block length 32, not 16",
        ),
    ],
)
def test_run_refuses_a_mismatched_graph_before_anything_starts(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert main(["run", "--proposers", "confidence,spiffy", "--limit", "1", "--output", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spotbench: error: ") and message in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "sdar-b", "--block-length", "32"], "spiffy was calibrated for model 'sdar-a', not 'sdar-b'"),
        (
            ["--model", "sdar-a", "--block-length", "16", "--untrained-block-length"],
            "spiffy was calibrated at block length 32, not 16",
        ),
    ],
)
def test_decode_refuses_a_mismatched_graph(capsys, args, message):
    assert main(["decode", "--prompt", "1+1=", "--proposer", "spiffy", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("spotbench: error: ") and message in err and "\n" not in err and not captured.out


@pytest.mark.parametrize(
    "tasks, message",
    [
        ("gsm8k/test:5", "must not come from a test split"),
        ("arith:3,mbpp/test:2", "must not come from a test split"),
        ("humaneval:2", "has no calibration split 'train'"),
        ("gsm8k", "expected TASK[/SPLIT]:N"),
    ],
)
def test_calibrate_refuses_test_splits_in_one_line(tmp_path, capsys, tasks, message):
    out = tmp_path / "graph"
    assert main(["calibrate-spiffy", "--model", "tiny-random:sdar", "--out", str(out), "--tasks", tasks]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spotbench: error: ") and message in err and "\n" not in err
    assert not out.exists()


def test_calibrate_is_deterministic_and_records_its_provenance(tmp_path, capsys):
    args = [
        "--model",
        "tiny-random:sdar",
        "--tasks",
        "arith:2",
        "--temperatures",
        "0,1",
        "--block-length",
        "8",
        "--gen-length",
        "16",
        "--nodes",
        "6",
    ]
    for name in ("a", "b"):
        assert main(["calibrate-spiffy", "--out", str(tmp_path / name), *args]) == 0
    first, second = ((tmp_path / name / "spiffy.json").read_text() for name in ("a", "b"))
    assert first == second
    data = json.loads(first)
    assert data["provenance"]["prompts"] == ["arith/train/0", "arith/train/1"]
    assert {k: data["provenance"][k] for k in ("target", "block_length", "gen_length", "rule", "temperatures")} == {
        "target": "tiny-random:sdar",
        "block_length": 8,
        "gen_length": 16,
        "rule": "top1",
        "temperatures": [0.0, 1.0],
    }
    assert set(data["graphs"]) == {"0", "1"} and all(len(g["nodes"]) <= 6 for g in data["graphs"].values())
    assert "git_revision" in data["provenance"]
    SpiffyCalibration.load(tmp_path / "a").save(tmp_path / "c")
    assert (tmp_path / "c" / "spiffy.json").read_text() == first
    check_arm_for_model(f"spiffy:{tmp_path / 'a'}", "tiny-random:sdar", 8)

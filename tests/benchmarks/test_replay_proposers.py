"""The replay benchmark's prompt-at-a-time loop: the same pass counts as replaying generations that
keep their logits, no logits kept afterwards, and plain accuracy counted from the plain answers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.decoding import DecodeConfig, parse_rule, plain_decode
from harness.decoding.replay import replay
from harness.pipeline import decode_text
from harness.targets.registry import load_dlm_target
from tasks.base import prompt_ids
from tasks.registry import get_task

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "replay_proposers.py"


def load_script():
    spec = importlib.util.spec_from_file_location("replay_proposers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_prompt_at_a_time_replay_equals_replaying_kept_generations_and_counts_accuracy() -> None:
    script = load_script()
    target = load_dlm_target("sdar-a", what="this test")
    task = get_task("arith", num_fewshot=0)
    samples = task.load("test", limit=3)
    rule = parse_rule("top1", target.family, target.mask_id)
    configs = [DecodeConfig(rule, 32, 16, temperature, i) for i, temperature in enumerate((0.0, 1.0, 0.0))]
    budgets = [2, 8]
    arms = {name: script.registry_arm(name, target) for name in ("confidence", "confidence-branch")}
    plains, replays = script.replay_prompts(target, task, samples, configs, arms, budgets)

    assert all(p.pass_logits is None and p.following is None for p in plains)
    for i, (sample, config) in enumerate(zip(samples, configs)):
        kept = plain_decode(target, prompt_ids(task, sample, target.tokenizer), config, keep_logits=True)
        assert kept.tokens.tolist() == plains[i].tokens.tolist()
        for arm, make in arms.items():
            for runs, budget in zip(replays[arm], budgets):
                assert runs[i].metrics.nfe == replay(kept, make(kept), config, budget).metrics.nfe

    scores = task.score(samples, [decode_text(target, p.answer_ids) for p in plains])
    correct = sum(bool(s["correct"]) for s in scores)
    line = script.accuracy_line(target, task, samples, plains, "sdar-a", 0.0)
    assert f"plain accuracy {correct}/3 " in line
    assert f"{sum(p.metrics.nfe for p in plains)} plain passes" in line

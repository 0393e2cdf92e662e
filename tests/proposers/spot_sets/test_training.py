"""SPOT-Sets data, training and calibration: examples are plain threshold decoding's sets, runs are
deterministic and resumable and record their rule, a calibration lowers the NLL it is fitted on."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from harness.decoding import DecodeConfig, Rule, parse_rule, plain_decode
from harness.decoding.noise import NoiseSource
from harness.errors import UserError
from harness.recipes import OPTIMIZER_FIELDS, load_recipe
from harness.targets.registry import load_dlm_target
from proposers.spot.collection import recipe_jobs
from proposers.spot.features import MASKED
from proposers.spot.network import SpotConfig, SpotNet, save_spot
from proposers.spot.recipe import OPTIMIZER
from proposers.spot_sets.calibration import fit_calibration
from proposers.spot_sets.collection import NOT_COMMITTED, SetViews, collect
from proposers.spot_sets.network import CONFIG_FILE, WEIGHTS_FILE, Calibration, SpotSetsNet, load_spot_sets
from proposers.spot_sets.training import SpotSetsRecipe, train, validate
from tasks.registry import train_prompts

PROMPT = list(b"Q: 2+2=?\nA:")
TINY_MODEL = {"width": 16, "layers": 1, "heads": 2, "ffn": 32}


def tiny_recipe(**fields) -> SpotSetsRecipe:
    """A recipe that collects and trains in seconds on a tiny target (a tau the random target's
    confidences cross at times, so sets of several positions occur); `fields` override it."""
    steps = {name: fields.pop(name) for name in list(fields) if name in OPTIMIZER_FIELDS}
    recipe = SpotSetsRecipe(
        name="t",
        target="tiny-random:sdar",
        rule="threshold:0.02",
        tasks={"arith": 2},
        temperatures=(0.0,),
        gen_length=16,
        block_length=8,
        optimizer=dataclasses.replace(OPTIMIZER, **({"steps": 2, "batch_size": 8, "warmup_steps": 1} | steps)),
        validation_fraction=0.5,
        eval_every=1,
        model=TINY_MODEL,
    )
    return dataclasses.replace(recipe, **fields)


def median_tau(target, temperature: float) -> float:
    """The median confidence of a plain top1 decode's decisions on PROMPT: a threshold there commits
    sets of several positions and single ones."""
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, temperature, 4)
    plain = plain_decode(target, PROMPT, cfg, keep_logits=True)
    assert plain.pass_logits is not None
    tempered = temperature if temperature > 0 and cfg.rule.confidence == "tempered_prob" else 1.0
    confidences = sorted(
        float((logits.double() / tempered).softmax(-1)[t.positions[0], t.tokens[0]])
        for logits, t in zip(plain.pass_logits, plain.steps)
    )
    return confidences[len(confidences) // 2]


def jobs_for(recipe: SpotSetsRecipe, target) -> list:
    return recipe_jobs(recipe, train_prompts(recipe.tasks, target.tokenizer))


@pytest.mark.parametrize("family", ["sdar", "llada"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_examples_are_the_sets_plain_threshold_decoding_commits(family, temperature) -> None:
    target = load_dlm_target(f"tiny-random:{family}")
    recipe = tiny_recipe(
        target=f"tiny-random:{family}",
        rule=f"threshold:{median_tau(target, temperature)!r}",
        model={**TINY_MODEL, "max_depth": 5},
    )
    views = collect(target, PROMPT, recipe, temperature, 4)
    rule = parse_rule(recipe.rule, target.family, target.mask_id)
    plain = plain_decode(target, PROMPT, DecodeConfig(rule, 16, 8, temperature, 4), keep_logits=True)
    assert plain.pass_logits is not None
    noise = NoiseSource(4, 8, target.vocab_size) if temperature > 0 else None
    top1 = Rule("top1", rule.mask_id, rule.confidence)
    following = {}  # (block, committed positions) -> the step taken there
    for span in plain.blocks(target.mask_id):
        committed: frozenset[int] = frozenset()
        for step in range(span.first, span.end):
            following[span.index, committed] = step
            committed |= set(plain.steps[step].positions)
    assert max(len(t.positions) for t in plain.steps) > 1
    for ages, in_set, token, argmax in zip(views.ages.long(), views.in_set, views.token, views.argmax.tolist()):
        committed = frozenset((ages != MASKED).nonzero().squeeze(1).tolist())
        # the node is a plain state (empty at the start of each block) and the label its step's set
        steps = [s for (_, c), s in following.items() if c == committed]
        [step] = [s for s in steps if list(plain.steps[s].positions) == in_set.nonzero().squeeze(1).tolist()]
        assert ((token != NOT_COMMITTED) == in_set).all() and in_set[argmax]
        state = torch.full((8,), target.mask_id)
        state[list(committed)] = 0
        assert argmax == top1(plain.pass_logits[step], state, noise(step) if noise else None, temperature).positions[0]
    block_start = (views.ages == MASKED).all(1) & (views.depth == 0)
    assert bool(block_start.any()) == (not target.family.caches_finished_blocks)
    assert int((views.depth == 0).sum()) == views.static.shape[0]  # every view has its depth-0 example


@pytest.mark.slow
def test_training_is_deterministic_records_its_rule_and_a_learning_curve(tmp_path):
    recipe = tiny_recipe(temperatures=(0.0, 1.0), steps=3)
    target = load_dlm_target(recipe.target)
    first = train(recipe, target, jobs_for(recipe, target), tmp_path / "run1", tmp_path / "out1")
    second = train(recipe, target, jobs_for(recipe, target), tmp_path / "run2", tmp_path / "out2")
    assert first["validation"] == second["validation"]
    assert (tmp_path / "out1" / WEIGHTS_FILE).read_bytes() == (tmp_path / "out2" / WEIGHTS_FILE).read_bytes()
    meta = json.loads((tmp_path / "out1" / CONFIG_FILE).read_text())
    assert {k: meta["provenance"][k] for k in ("target", "rule", "tau", "data", "generations")} == {
        "target": "tiny-random:sdar",
        "rule": "threshold:0.02",
        "tau": 0.02,
        "data": ["arith/train"],
        "generations": 4,
    }
    assert [point["step"] for point in meta["curve"]] == [0, 1, 2, 3]
    assert {"argmax", "set", "child", "rule_set", "loss"} <= set(meta["curve"][-1])
    assert load_spot_sets(tmp_path / "out1").config == SpotConfig(**TINY_MODEL)


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path):
    recipe = tiny_recipe(steps=4, checkpoint_every=2, eval_every=2)
    target = load_dlm_target(recipe.target)
    whole = train(recipe, target, jobs_for(recipe, target), tmp_path / "whole", tmp_path / "a")
    train(
        tiny_recipe(steps=2, checkpoint_every=2, eval_every=2),
        target,
        jobs_for(recipe, target),
        tmp_path / "half",
        tmp_path / "x",
    )
    state = torch.load(tmp_path / "half" / "train_state.pt", weights_only=False)
    state["recipe"] = dataclasses.asdict(recipe)  # as if the same recipe had stopped at step 2
    torch.save(state, tmp_path / "half" / "train_state.pt")
    resumed = train(recipe, target, jobs_for(recipe, target), tmp_path / "half", tmp_path / "b")
    assert (tmp_path / "a" / WEIGHTS_FILE).read_bytes() == (tmp_path / "b" / WEIGHTS_FILE).read_bytes()
    assert resumed["curve"] == whole["curve"]


def test_a_spot_checkpoint_starts_the_trunk_and_the_commit_head_starts_at_the_rule(tmp_path):
    torch.manual_seed(5)
    spot = SpotNet(SpotConfig(**TINY_MODEL))
    save_spot(spot, tmp_path / "spot", {"provenance": {"target": "tiny-random:sdar"}})
    recipe = tiny_recipe(steps=1, learning_rate=1e-12, warmup_steps=0, init_checkpoint=str(tmp_path / "spot"))
    target = load_dlm_target(recipe.target)
    report = train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "out")
    net = load_spot_sets(tmp_path / "out")
    assert torch.allclose(net.project.weight, spot.project.weight) and torch.allclose(net.head.weight, spot.head.weight)
    assert net.commit_head.weight.abs().max() < 1e-6 and abs(net.commit_weight.item() - 1) < 1e-6
    assert report["provenance"]["init_checkpoint"]["folder"] == str(tmp_path / "spot")
    with pytest.raises(UserError, match="holds no SPOT or SPOT-Sets checkpoint"):
        train(tiny_recipe(init_checkpoint=str(tmp_path)), target, [], tmp_path / "r2", tmp_path / "o2")


@pytest.mark.parametrize(
    "line, error",
    [
        ("rule: top1", "rule must be threshold:TAU"),
        ("rule: threshold:1.5", "rule must be threshold:TAU"),
        ("depth_decay: 0", "depth_decay must be in (0, 1]"),
        ("eval_every: 0", "eval_every must be a whole number >= 1"),
    ],
)
def test_recipe_refuses_a_bad_rule_or_field(tmp_path, line, error):
    lines = ["name: t", "target: sdar-a", "rule: threshold:0.9", "tasks: {arith: 1}"]
    lines = [item for item in lines if item.split(":")[0] != line.split(":")[0]] + [line]
    (tmp_path / "r.yaml").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=error.replace("(", r"\(").replace(")", r"\)")):
        load_recipe(SpotSetsRecipe, tmp_path / "r.yaml")


def test_calibration_lowers_the_nll_it_is_fitted_on():
    recipe = tiny_recipe(temperatures=(0.0, 1.0))
    target = load_dlm_target(recipe.target)
    data = SetViews.cat([collect(target, ids, recipe, t, k) for k, (_, ids, t) in enumerate(jobs_for(recipe, target))])
    torch.manual_seed(0)
    net = SpotSetsNet(SpotConfig(**TINY_MODEL)).eval()
    calibration = fit_calibration(net, data, 0.02)
    before, after = validate(net, data, 0.02), validate(net, data, 0.02, calibration)
    assert after["loss"] < before["loss"] and calibration != Calibration()
    assert after["token_nll"] < before["token_nll"]  # a random token head: the candidate does better
    assert fit_calibration(net, data, 0.02) == calibration  # deterministic


def test_a_recipe_that_names_a_rule_trains_spot_sets_any_other_spot() -> None:
    from harness.bundled import ZOO_DIR
    from proposers.spot.recipe import SpotRecipe
    from proposers.spot_sets.training import load_spot_family_recipe

    sets = load_spot_family_recipe(ZOO_DIR / "proposers" / "spot-sets-sdar-a-0.9.yaml", steps=3)
    spot = load_spot_family_recipe(ZOO_DIR / "proposers" / "spot-sdar-a.yaml")
    assert isinstance(sets, SpotSetsRecipe) and sets.rule == "threshold:0.9" and sets.optimizer.steps == 3
    assert isinstance(spot, SpotRecipe) and spot.optimizer.steps == 10000

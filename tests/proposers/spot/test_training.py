"""SPOT training: runs are deterministic, resumable and carry their provenance; recipe fields do
what they say."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from harness.targets.registry import load_dlm_target
from harness.validation import read_mapping
from proposers.spot.collection import DATA_FILE, Views, collect, recipe_jobs
from proposers.spot.network import CONFIG_FILE, WEIGHTS_FILE, SpotConfig, load_spot
from proposers.spot.recipe import SpotRecipe
from proposers.spot.training import train
from tasks.registry import train_prompts

PROMPT = list(b"Q: 2+2=?\nA:")


def jobs_for(recipe: SpotRecipe, target) -> list:
    return recipe_jobs(recipe, train_prompts(recipe.tasks, target.tokenizer))


def tiny_recipe(**fields) -> SpotRecipe:
    """A recipe that collects and trains in seconds on a tiny target; `fields` override its values."""
    recipe = SpotRecipe(
        name="t",
        target="tiny-random:sdar",
        tasks={"arith": 2},
        temperatures=(0.0,),
        gen_length=16,
        block_length=8,
        steps=2,
        batch_size=8,
        warmup_steps=1,
        validation_fraction=0.5,
        model={"width": 16, "layers": 1, "heads": 2, "ffn": 32},
    )
    return dataclasses.replace(recipe, **fields)


def test_training_is_deterministic_and_records_provenance(tmp_path):
    recipe = tiny_recipe(temperatures=(0.0, 1.0), steps=3, validation_fraction=0.25)
    target = load_dlm_target(recipe.target)
    first = train(recipe, target, jobs_for(recipe, target), tmp_path / "run1", tmp_path / "out1")
    second = train(recipe, target, jobs_for(recipe, target), tmp_path / "run2", tmp_path / "out2")
    assert first["validation"] == second["validation"]
    assert (tmp_path / "out1" / WEIGHTS_FILE).read_bytes() == (tmp_path / "out2" / WEIGHTS_FILE).read_bytes()
    meta = json.loads((tmp_path / "out1" / CONFIG_FILE).read_text())
    assert meta["provenance"]["target"] == "tiny-random:sdar" and meta["provenance"]["data"] == ["arith/train"]
    revision = meta["provenance"]["git_revision"]
    assert revision is None or len(revision.removesuffix("+dirty")) == 40
    # resumes: nothing left to do
    reloaded = train(recipe, target, jobs_for(recipe, target), tmp_path / "run1", tmp_path / "out3")
    assert reloaded["validation"] == first["validation"]
    assert load_spot(tmp_path / "out1").config.width == 16
    changed = dataclasses.replace(recipe, learning_rate=0.5)
    with pytest.raises(Exception, match="different recipe"):
        train(changed, target, jobs_for(changed, target), tmp_path / "run1", tmp_path / "out4")


@pytest.mark.parametrize("average_from", [None, 2])
def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path, monkeypatch, average_from):
    recipe = tiny_recipe(temperatures=(0.0, 1.0), steps=6, checkpoint_every=2, average_from=average_from)
    target = load_dlm_target(recipe.target)
    train(recipe, target, jobs_for(recipe, target), tmp_path / "straight", tmp_path / "out1")
    original, calls = torch.optim.AdamW.step, []

    def crash_on_fifth_step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", crash_on_fifth_step)
    with pytest.raises(KeyboardInterrupt):
        train(recipe, target, jobs_for(recipe, target), tmp_path / "resumed", tmp_path / "out2")
    monkeypatch.setattr(torch.optim.AdamW, "step", original)
    assert torch.load(tmp_path / "resumed" / "train_state.pt", weights_only=False)["step"] == 4
    train(recipe, target, jobs_for(recipe, target), tmp_path / "resumed", tmp_path / "out2")
    assert (tmp_path / "out1" / WEIGHTS_FILE).read_bytes() == (tmp_path / "out2" / WEIGHTS_FILE).read_bytes()


def test_a_run_saved_before_a_recipe_field_existed_resumes_as_its_default(tmp_path):
    from harness.errors import UserError

    recipe = tiny_recipe()
    target = load_dlm_target(recipe.target)
    train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "out")
    state_path = tmp_path / "run" / "train_state.pt"
    state = torch.load(state_path, weights_only=False)
    del state["recipe"]["teachers"], state["recipe"]["distill_weight"]  # as saved before they existed
    torch.save(state, state_path)
    resumed = train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "resumed")
    assert resumed["steps"] == recipe.steps
    assert (tmp_path / "resumed" / WEIGHTS_FILE).read_bytes() == (tmp_path / "out" / WEIGHTS_FILE).read_bytes()
    taught = dataclasses.replace(recipe, teachers=(str(tmp_path / "out"),))
    with pytest.raises(UserError, match="different recipe"):
        train(taught, target, jobs_for(taught, target), tmp_path / "run", tmp_path / "taught")
    state["recipe"]["removed_field"] = 1
    torch.save(state, state_path)
    with pytest.raises(UserError, match="different recipe"):
        train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "again")


def test_training_seed_reseeds_the_network_but_keeps_the_data_and_split(tmp_path):
    recipe = tiny_recipe()
    target = load_dlm_target(recipe.target)
    reports = {}
    for training_seed in (None, 0, 1):
        run = tmp_path / f"run{training_seed}"
        run.mkdir()
        if training_seed is not None:  # shares the first run's collection, as the field's docstring says
            (run / DATA_FILE).symlink_to(tmp_path / "runNone" / DATA_FILE)
        changed = dataclasses.replace(recipe, training_seed=training_seed)
        reports[training_seed] = train(
            changed, target, jobs_for(changed, target), run, tmp_path / f"out{training_seed}"
        )
    weights = {k: (tmp_path / f"out{k}" / WEIGHTS_FILE).read_bytes() for k in reports}
    assert weights[None] == weights[0] and weights[1] != weights[0]
    assert reports[1]["provenance"]["training_seed"] == 1 and reports[1]["provenance"]["seed"] == 0
    assert reports[1]["examples"] == reports[0]["examples"]


def test_a_run_folder_refuses_data_collected_for_another_recipe(tmp_path):
    from harness.errors import UserError

    recipe = tiny_recipe(steps=1)
    target = load_dlm_target(recipe.target)
    train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "out")
    (tmp_path / "run" / "train_state.pt").unlink()  # only the collected data is left to guard
    more_prompts = dataclasses.replace(recipe, tasks={"arith": 3})
    with pytest.raises(UserError, match=r"collected for another .* use a new --run-dir"):
        train(more_prompts, target, jobs_for(more_prompts, target), tmp_path / "run", tmp_path / "out2")
    longer = dataclasses.replace(recipe, steps=2)
    assert train(longer, target, jobs_for(longer, target), tmp_path / "run", tmp_path / "out3")["steps"] == 2


def test_depth_decay_draws_shallow_examples_more_often(tmp_path, monkeypatch) -> None:
    import proposers.spot.training as training

    drawn: dict[float, list[int]] = {}
    real_loss = training.batch_loss

    def recording(net, data, index, *teaching):
        if net.training:
            drawn[decay].extend(data["depth"][index].tolist())
        return real_loss(net, data, index, *teaching)

    monkeypatch.setattr(training, "batch_loss", recording)
    target = load_dlm_target("tiny-random:sdar")
    for decay in (1.0, 0.01):
        drawn[decay] = []
        recipe = tiny_recipe(steps=20, batch_size=16, depth_decay=decay)
        report = train(recipe, target, jobs_for(recipe, target), tmp_path / f"run{decay}", tmp_path / f"out{decay}")
        assert set(report["validation_depths_0_3"]) == {"loss", "accuracy", "token_accuracy"}
    assert len(drawn[1.0]) == len(drawn[0.01]) == 20 * 16
    at_depth_0 = {decay: sum(d == 0 for d in depths) / len(depths) for decay, depths in drawn.items()}
    assert at_depth_0[0.01] > 0.9 and at_depth_0[1.0] < 0.5


@pytest.mark.parametrize(
    "line, error",
    [
        ("depth_decay: 0", r"depth_decay must be in \(0, 1\], not 0"),
        ("steps: 10\naverage_from: 10", r"average_from must be a step in \[0, steps\) = \[0, 10\), not 10"),
        ("distill_weight: 1.5", r"distill_weight must be in \[0, 1\], not 1.5"),
        ("temperatures: [0, 1e30]", r"temperatures"),
        ("temperatures: [0, 1e-9]", r"temperatures"),
    ],
)
def test_recipe_rejects_out_of_range_fields(tmp_path, line, error):
    from harness.errors import UserError

    path = tmp_path / "r.yaml"
    path.write_text(f"name: t\ntarget: sdar-a\ntasks: {{arith: 2}}\n{line}\n")
    with pytest.raises(UserError, match=error):
        SpotRecipe.load(path)


def test_init_checkpoint_starts_the_run_from_its_weights(tmp_path):
    from harness.errors import UserError

    recipe = tiny_recipe()
    target = load_dlm_target(recipe.target)
    train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "start")
    frozen = dataclasses.replace(recipe, init_checkpoint=str(tmp_path / "start"), learning_rate=0.0, training_seed=1)
    report = train(frozen, target, jobs_for(frozen, target), tmp_path / "run-frozen", tmp_path / "frozen")
    assert (tmp_path / "frozen" / WEIGHTS_FILE).read_bytes() == (tmp_path / "start" / WEIGHTS_FILE).read_bytes()
    started = report["provenance"]["init_checkpoint"]
    assert started["folder"] == str(tmp_path / "start") and started["provenance"]["target"] == recipe.target
    wider = dataclasses.replace(frozen, model=recipe.model | {"width": 32})
    with pytest.raises(UserError, match="make the recipe's model match it"):
        train(wider, target, jobs_for(wider, target), tmp_path / "run-wider", tmp_path / "wider")
    with pytest.raises(UserError, match="holds no SPOT checkpoint"):
        train(
            dataclasses.replace(recipe, init_checkpoint=str(tmp_path)),
            target,
            [],
            tmp_path / "run-none",
            tmp_path / "x",
        )


def test_average_from_holds_the_learning_rate_and_saves_the_mean_of_the_later_weights(tmp_path, monkeypatch) -> None:
    import proposers.spot.loop as loop

    learning_rates: list[float] = []
    weights: list[list[torch.Tensor]] = []
    real_step = loop.optimizer_step

    def recording(optimizer, parameters, loss, lr, grad_clip):
        parameters = list(parameters)
        real_step(optimizer, parameters, loss, lr, grad_clip)
        learning_rates.append(lr)
        weights.append([p.detach().clone() for p in parameters])

    monkeypatch.setattr(loop, "optimizer_step", recording)
    recipe = tiny_recipe(steps=4, warmup_steps=2, average_from=1, learning_rate=0.01)
    target = load_dlm_target(recipe.target)
    train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "out")
    assert learning_rates == pytest.approx([0.005, 0.01, 0.01, 0.01])  # warmup, then held (cosine would fall)
    expected = [torch.stack(step).mean(0) for step in zip(*weights[1:])]  # after steps 2, 3 and 4
    saved = list(load_spot(tmp_path / "out").parameters())
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(saved, expected))
    assert not torch.allclose(saved[0], weights[-1][0])
    # resumes the average, nothing left to do
    train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "resumed")
    assert (tmp_path / "resumed" / WEIGHTS_FILE).read_bytes() == (tmp_path / "out" / WEIGHTS_FILE).read_bytes()


def test_distillation_loss_is_the_cross_entropy_from_the_teachers_mixture():
    from proposers.spot.network import SpotEnsemble, SpotNet
    from proposers.spot.training import batch_loss

    target = load_dlm_target("tiny-random:sdar")
    views, _ = collect(target, PROMPT, 16, 8, 1.0, 4, SpotConfig(max_depth=5))
    data = Views.cat([views])
    index = torch.arange(data["label"].numel())
    config = SpotConfig(width=16, layers=1, heads=2, ffn=32, max_depth=5)
    torch.manual_seed(0)
    student, first, second = SpotNet(config), SpotNet(config), SpotNet(config)
    inputs = (data["static"][data["view"]], data["candidate"], data["ages"].long(), data["depth"], data["temperature"])

    def joint(net):  # P(position) * P(token outcome | position), in probabilities
        position, token = net(*inputs)
        return position.exp()[..., None] * token.exp()

    mixture = (joint(first) + joint(second)) / 2
    assert torch.allclose(mixture.sum((1, 2)), torch.ones(index.numel()))
    logs = joint(student).log()
    expected_soft = -torch.where(mixture > 0, mixture * logs, 0.0).sum((1, 2)).mean()
    hard, _, _ = batch_loss(student, data, index)
    soft, _, _ = batch_loss(student, data, index, SpotEnsemble([first, second]), 1.0)
    mixed, _, _ = batch_loss(student, data, index, SpotEnsemble([first, second]), 0.25)
    assert soft.item() == pytest.approx(expected_soft.item(), rel=1e-5)
    assert mixed.item() == pytest.approx(0.75 * hard.item() + 0.25 * expected_soft.item(), rel=1e-5)
    assert soft.item() != pytest.approx(hard.item(), rel=1e-3)


def test_teachers_pull_the_student_towards_their_mixture(tmp_path):
    from harness.errors import UserError
    from proposers.spot.network import SpotEnsemble, SpotNet, joint_logp, save_spot

    recipe = tiny_recipe(steps=20, learning_rate=0.01, validation_fraction=0.5)
    target = load_dlm_target(recipe.target)
    train(recipe, target, jobs_for(recipe, target), tmp_path / "run", tmp_path / "trained")
    torch.manual_seed(5)  # a teacher far from what the recorded commits teach: random, loud, no confidence prior
    teacher = SpotNet(SpotConfig(**recipe.model))
    with torch.no_grad():
        teacher.head.weight.mul_(50.0)
        teacher.token_head.weight.mul_(50.0)
        teacher.confidence_weight.zero_()
    save_spot(teacher, tmp_path / "teacher", {"provenance": {"seed": 5}})
    data = Views.cat(torch.load(tmp_path / "run" / DATA_FILE, weights_only=False)["parts"])
    inputs = (data["static"][data["view"]], data["candidate"], data["ages"].long(), data["depth"], data["temperature"])
    with torch.no_grad():
        aim = joint_logp(*SpotEnsemble([teacher.eval()])(*inputs))

    def divergence(folder):  # KL(teacher || student) over (position, token outcome), mean per example
        with torch.no_grad():
            student = joint_logp(*load_spot(folder)(*inputs))
        return float(torch.where(aim.isfinite(), aim.exp() * (aim - student), 0.0).sum((1, 2)).mean())

    reports = {}
    for weight in (0.0, 1.0):
        taught = dataclasses.replace(
            recipe,
            init_checkpoint=str(tmp_path / "trained"),
            training_seed=1,
            teachers=(str(tmp_path / "teacher"),),
            distill_weight=weight,
        )
        run = tmp_path / f"run{weight}"
        run.mkdir()
        (run / DATA_FILE).symlink_to(tmp_path / "run" / DATA_FILE)
        reports[weight] = train(taught, target, jobs_for(taught, target), run, tmp_path / f"student{weight}")
    assert divergence(tmp_path / "student1.0") < 0.5 * divergence(tmp_path / "student0.0")
    assert divergence(tmp_path / "student1.0") < 0.5 * divergence(tmp_path / "trained")
    taught_by = reports[1.0]["provenance"]["teachers"]
    assert [t["folder"] for t in taught_by] == [str(tmp_path / "teacher")] and taught_by[0]["provenance"]["seed"] == 5
    with pytest.raises(UserError, match=r"teacher .* holds no SPOT checkpoint"):
        train(dataclasses.replace(recipe, teachers=(str(tmp_path),)), target, [], tmp_path / "run-none", tmp_path / "x")
    other_ages = dataclasses.replace(recipe, teachers=(str(tmp_path / "teacher"),), model=recipe.model | {"max_age": 4})
    with pytest.raises(UserError, match="use teachers trained with the recipe's max_age"):
        train(other_ages, target, jobs_for(other_ages, target), tmp_path / "run-ages", tmp_path / "y")


ZOO_PROPOSERS = Path(__file__).resolve().parents[3] / "zoo" / "proposers"


def committed_recipes() -> list[SpotRecipe]:
    """SPOT's committed recipes (a recipe that names a rule is SPOT-Sets': tests/proposers/spot_sets/test_zoo.py)."""
    return [
        SpotRecipe.load(path)
        for path in sorted(ZOO_PROPOSERS.rglob("*.yaml"))
        if "rule" not in read_mapping(path, "recipe")
    ]


def test_every_committed_recipe_loads_and_names_committed_checkpoints():
    recipes = committed_recipes()
    assert len(recipes) >= 7
    for recipe in recipes:
        for folder in [recipe.init_checkpoint, *recipe.teachers]:
            if folder is not None:
                net = load_spot(ZOO_PROPOSERS.parents[1] / folder)
                assert net.config == SpotConfig(**recipe.model), (recipe.name, folder)


def test_every_committed_checkpoint_loads_and_its_recipe_is_committed():
    """A checkpoint under zoo/proposers is rebuilt by the committed recipe of the name its spot.json
    records, with every field it recorded unchanged."""
    # Through JSON, as spot.json stores the recipe (tuples become lists).
    recipes = {recipe.name: json.loads(json.dumps(dataclasses.asdict(recipe))) for recipe in committed_recipes()}
    checkpoints = sorted(meta.parent for meta in ZOO_PROPOSERS.rglob(CONFIG_FILE))
    assert len(checkpoints) >= 4
    for folder in checkpoints:
        recorded = json.loads((folder / CONFIG_FILE).read_text())["recipe"]
        assert recorded["name"] in recipes, folder
        committed = recipes[recorded["name"]]
        assert {k: committed.get(k) for k in recorded} == recorded, folder
        assert load_spot(folder).config == SpotConfig(**recorded["model"]), folder

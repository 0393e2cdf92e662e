"""Training SPOT on plain trajectories of one target: the loss, teachers, averaging and the run (the
resumable loop is `proposers.spot.loop`, shared with SPOT-Sets).

The recipe is `proposers.spot.recipe.SpotRecipe`; the examples come from `proposers.spot.collection`.

Training is deterministic by the recipe's seed; the run folder keeps the collected data and a
`train_state.pt` every `checkpoint_every` steps, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import cast

import torch
from torch import Tensor
from torch.optim.swa_utils import AveragedModel

from harness.errors import UserError
from harness.targets.target import DLMTarget
from harness.versions import git_revision
from proposers.spot.collection import ChunkMap, Job, Views, collect_all, collected, collection_of, held_out
from proposers.spot.loop import STATE_FILE, Extras, Run, train_steps
from proposers.spot.network import CONFIG_FILE, SpotConfig, SpotEnsemble, SpotNet, joint_logp, load_spot, save_spot
from proposers.spot.recipe import SpotRecipe


def batch_loss(
    net: SpotNet,
    data: dict[str, Tensor],
    index: Tensor,
    teacher: SpotEnsemble | None = None,
    distill_weight: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Mean NLL of the next committed position plus that of its token outcome (with a teacher, mixed
    with the cross-entropy from its joint distribution); and the number of positions and of token
    outcomes predicted right (argmax)."""
    inputs = (
        data["static"][data["view"][index]],
        data["candidate"][index],
        data["ages"][index].long(),
        data["depth"][index],
        data["temperature"][index],
    )
    position_logp, token_logp = net(*inputs)
    label, token = data["label"][index], data["token"][index].long()
    at_label = token_logp[torch.arange(index.numel()), label]
    loss = -position_logp.gather(1, label[:, None]).mean() - at_label.gather(1, token[:, None]).mean()
    if teacher is not None:
        with torch.no_grad():
            aim = joint_logp(*teacher(*inputs))
        student = joint_logp(position_logp, token_logp)
        soft = -torch.where(aim.isfinite(), aim.exp() * student, 0.0).sum((1, 2)).mean()
        loss = (1 - distill_weight) * loss + distill_weight * soft
    return loss, (position_logp.argmax(1) == label).sum(), (at_label.argmax(1) == token).sum()


def examples_where(data: dict[str, Tensor], keep: Tensor) -> dict[str, Tensor]:
    """The examples selected by a boolean mask (the views they read stay as they are)."""
    return {k: v if k == "static" else v[keep] for k, v in data.items()}


@torch.no_grad()
def validate(net: SpotNet, data: dict[str, Tensor], batch_size: int) -> dict[str, float]:
    losses, right, tokens_right, count = 0.0, 0, 0, data["label"].numel()
    for start in range(0, count, batch_size):
        index = torch.arange(start, min(count, start + batch_size))
        loss, hits, token_hits = batch_loss(net, data, index)
        losses += float(loss) * index.numel()
        right += int(hits)
        tokens_right += int(token_hits)
    count = max(1, count)
    return {"loss": losses / count, "accuracy": right / count, "token_accuracy": tokens_right / count}


def checkpoint_at(folder: str, field_name: str) -> tuple[SpotNet, dict]:
    """A recipe's reference to a SPOT checkpoint folder: the network and the record of it."""
    if not (Path(folder) / CONFIG_FILE).exists():
        raise UserError(
            f"{field_name} {folder} holds no SPOT checkpoint ({CONFIG_FILE}); "
            f"give the folder that train-proposer --out wrote"
        )
    meta = json.loads((Path(folder) / CONFIG_FILE).read_text())
    return load_spot(folder), {"folder": str(folder), "provenance": meta.get("provenance", {})}


def initial_weights(folder: str, config: SpotConfig) -> tuple[dict[str, Tensor], dict]:
    """The weights and provenance of the checkpoint a fine-tuning recipe starts from."""
    start, record = checkpoint_at(folder, "init_checkpoint")
    if start.config != config:
        raise UserError(
            f"init_checkpoint {folder} has model {dataclasses.asdict(start.config)}, the recipe "
            f"{dataclasses.asdict(config)}; make the recipe's model match it"
        )
    return start.state_dict(), record


def teachers_of(recipe: SpotRecipe, config: SpotConfig) -> tuple[SpotEnsemble | None, list[dict]]:
    """The recipe's teachers as one ensemble (None without teachers), and the record of each."""
    nets, records = [], []
    for folder in recipe.teachers:
        net, record = checkpoint_at(folder, "teacher")
        if net.config.max_age != config.max_age:
            raise UserError(
                f"teacher {folder} dates commits up to max_age {net.config.max_age}, the recipe's "
                f"model up to {config.max_age}; use teachers trained with the recipe's max_age"
            )
        nets.append(net)
        records.append(record)
    return (SpotEnsemble(nets).eval() if nets else None), records


def train(
    recipe: SpotRecipe,
    target: DLMTarget,
    jobs: list[Job],
    run_dir: Path,
    out_dir: Path,
    map_chunks: ChunkMap | None = None,
) -> dict:
    """Collect `jobs` (or reuse the run folder's data; `map_chunks` says where chunks run, see
    `collect_all`), train (or resume) and save the checkpoint to `out_dir`."""
    config = SpotConfig(**recipe.model)
    started_from = None  # the checkpoints the recipe names are checked before the long collection
    if recipe.init_checkpoint is not None:
        weights, started_from = initial_weights(recipe.init_checkpoint, config)
    teacher, taught_by = teachers_of(recipe, config)
    parts, sources = collected(
        run_dir,
        collection_of(recipe),
        "target, tasks, temperatures, lengths, seed or depth",
        lambda: collect_all(recipe, target, jobs, map_chunks),
    )
    validation, training = (Views.cat(chosen) for chosen in held_out(parts, recipe.seed, recipe.validation_fraction))
    training_seed = recipe.seed if recipe.training_seed is None else recipe.training_seed
    torch.manual_seed(training_seed)
    net = SpotNet(config)
    if recipe.init_checkpoint is not None:
        net.load_state_dict(weights)
    averaged = None if recipe.average_from is None else AveragedModel(net)
    step = train_steps(
        recipe,
        Run(net, list(net.parameters()), training_seed, run_dir / STATE_FILE, averaging(recipe, net, averaged)),
        training["depth"],
        lambda index: batch_loss(net, training, index, teacher, recipe.distill_weight)[0],
    )
    if averaged is not None:
        net = cast(SpotNet, averaged.module)  # the averaged copy of the network
    net.eval()
    report = {
        "recipe": dataclasses.asdict(recipe),
        "provenance": {
            "target": recipe.target,
            "data": sorted({s.split("/")[0] + "/train" for s in sources}),
            "generations": len(sources),
            "seed": recipe.seed,
            "training_seed": training_seed,
            "init_checkpoint": started_from,
            "teachers": taught_by,
            "git_revision": git_revision(),
        },
        "examples": {"train": training["label"].numel(), "validation": validation["label"].numel()},
        "validation": validate(net, validation, 1024),
        "validation_depths_0_3": validate(net, examples_where(validation, validation["depth"] < 4), 1024),
        "steps": step,
    }
    save_spot(net, out_dir, report)
    return report


def averaging(recipe: SpotRecipe, net: SpotNet, averaged: AveragedModel | None) -> Extras:
    """Stochastic weight averaging from `average_from` on (the learning rate held at its value there),
    the average kept in each checkpoint; nothing without it."""
    if averaged is None or recipe.average_from is None:
        return Extras()
    start = recipe.average_from

    def restore(state: dict | None, step: int) -> None:
        if state is not None:
            averaged.load_state_dict(state["averaged"])

    def after_step(step: int) -> None:
        if step > start:
            averaged.update_parameters(net)

    return Extras(restore, after_step, lambda: {"averaged": averaged.state_dict()}, lambda step: min(step, start))

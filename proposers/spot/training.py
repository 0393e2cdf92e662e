"""Training SPOT on plain trajectories of one target: the loss and a resumable loop.

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
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from harness.errors import UserError
from harness.targets.target import DLMTarget
from harness.training.loop import load_state, optimizer_step, save_state, warmup_cosine
from harness.versions import git_revision
from proposers.spot.collection import ChunkMap, Job, Views, collect_all, collected, collection_of, held_out
from proposers.spot.network import CONFIG_FILE, SpotConfig, SpotEnsemble, SpotNet, joint_logp, load_spot, save_spot
from proposers.spot.recipe import SpotRecipe

STATE_FILE = "train_state.pt"


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
def evaluate(net: SpotNet, data: dict[str, Tensor], batch_size: int) -> dict[str, float]:
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


def resumed(
    path: Path, recipe: object, net: nn.Module, optimizer: torch.optim.Optimizer, order: torch.Generator
) -> dict | None:
    """The training state a run folder keeps (None on a fresh run; a run of another recipe is
    refused), with the network, the optimizer and the example order restored from it."""
    state = load_state(path, recipe, "use a new --run-dir")
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
    return state


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
    optimizer = torch.optim.AdamW(net.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    order = torch.Generator().manual_seed(training_seed + 1)
    step = 0
    state_path = run_dir / STATE_FILE
    state = resumed(state_path, recipe, net, optimizer, order)
    if state is not None:
        step = state["step"]
        if averaged is not None:
            averaged.load_state_dict(state["averaged"])
    count = training["label"].numel()
    draw = recipe.depth_decay ** training["depth"].double()
    progress = tqdm(total=recipe.steps, initial=step, desc=f"train {recipe.name}", unit="step")
    net.train()
    while step < recipe.steps:
        index = torch.multinomial(draw, recipe.batch_size, replacement=True, generator=order)
        loss, _, _ = batch_loss(net, training, index, teacher, recipe.distill_weight)
        held = step if recipe.average_from is None else min(step, recipe.average_from)
        lr = warmup_cosine(recipe.learning_rate, recipe.warmup_steps, recipe.steps, held)
        optimizer_step(optimizer, net.parameters(), loss, lr, grad_clip=1.0)
        step += 1
        if averaged is not None and recipe.average_from is not None and step > recipe.average_from:
            averaged.update_parameters(net)
        progress.update(1)
        progress.set_postfix(loss=f"{loss.item():.3f}")
        if step % recipe.checkpoint_every == 0 or step == recipe.steps:
            state = dict(
                recipe=dataclasses.asdict(recipe),
                model=net.state_dict(),
                optimizer=optimizer.state_dict(),
                order=order.get_state(),
                step=step,
            )
            if averaged is not None:
                state["averaged"] = averaged.state_dict()
            save_state(state_path, state)
    progress.close()
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
        "examples": {"train": count, "validation": validation["label"].numel()},
        "validation": evaluate(net, validation, 1024),
        "validation_depths_0_3": evaluate(net, examples_where(validation, validation["depth"] < 4), 1024),
        "steps": step,
    }
    save_spot(net, out_dir, report)
    return report

"""Calibrating a SPOT-Sets checkpoint for another target (`spotbench calibrate-spot-sets`): the fit and the whole
run from a checkpoint folder to a calibrated copy.

A SPOT-Sets checkpoint ranks positions on any target (its inputs are relative), but how probable a
commit is depends on the target: how often a confidence just under tau crosses it after one commit,
how sure the argmax is. Calibration keeps the network and fits seven numbers on the target's own
plain threshold trajectories (prompt k decodes with seed + k at every temperature): scales, biases and
rule weights of the commit logits, the argmax and the token distributions
(`proposers.spot_sets.network.Calibration`, by L-BFGS on the NLL of the child the target takes). The
output folder gets a copy of the checkpoint and `calibration.json` (the values, the NLL and accuracies
before and after, provenance). The prompts are the caller's (the command reads train splits, at most
`MAX_PROMPTS`); the collection runs here or through the caller's map function, as training's does.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import torch
from torch import Tensor

from harness.errors import UserError
from harness.targets.target import DLMTarget
from harness.training.loop import save_state
from harness.versions import git_revision
from proposers.spot.collection import DATA_FILE, ChunkMap
from proposers.spot_sets.collection import SetViews, collect_all
from proposers.spot_sets.network import (
    CALIBRATION_FILE,
    CONFIG_FILE,
    WEIGHTS_FILE,
    Calibration,
    SpotSetsNet,
    load_spot_sets,
    read_meta,
    rule_inputs,
    threshold_tau,
)
from proposers.spot_sets.training import forward, set_nll, validate

MAX_PROMPTS = 50
"""A light calibration: seven numbers need few examples (a prompt yields about 250), and a cap keeps
it a calibration, not a second training run on the other target."""
CALIBRATION_PRIOR = 0.01
"""Weight of a Gaussian prior on the calibration's numbers (log scales and temperatures, bias, rule
weights) around "no change": where the calibration examples separate commits perfectly the NLL
alone keeps falling as the scale grows."""


@dataclass(frozen=True)
class Settings:
    """What the collection reads (`proposers.spot_sets.collection.Collecting`)."""

    target: str
    rule: str
    gen_length: int
    block_length: int
    seed: int
    max_depth: int
    max_age: int


@dataclass(frozen=True)
class Request:
    """One calibration: which checkpoint, for which target and rule, on which prompts."""

    checkpoint: str
    """The spec it was named by (`spot-sets:DIR`), recorded in provenance."""
    folder: Path
    out: Path
    rule: str
    names: list[str]
    """The prompts' names (`task/split/index`), recorded in provenance."""
    prompts: list[list[int]]
    temperatures: list[float]
    gen_length: int
    block_length: int
    seed: int


def check_request(folder: Path, rule: str | None, out: Path) -> str:
    """The rule to calibrate for (the checkpoint's own if None), refused unless a threshold rule, and
    an output folder other than the checkpoint; checked before any target loads."""
    rule = rule or read_meta(folder)["provenance"]["rule"]
    if threshold_tau(rule) is None:
        raise UserError(f"--rule {rule}: SPOT-Sets is calibrated for a threshold rule, threshold:TAU, TAU in (0, 1]")
    if out.resolve() == folder.resolve():
        raise UserError(f"--out {out} is the checkpoint itself; calibrate into a new folder (it gets a copy)")
    return rule


def calibrate(
    request: Request,
    target: DLMTarget,
    model: str,
    run_dir: Path | None = None,
    map_chunks: ChunkMap | None = None,
) -> dict:
    """Collect `target`'s plain trajectories of the request's prompts (or reuse those kept in
    `run_dir` with the same collection settings), fit the calibration and write the calibrated copy;
    returns its record. `model` is the target's name as the run names it."""
    meta = read_meta(request.folder)
    tau = cast(float, threshold_tau(request.rule))
    settings = Settings(
        model,
        request.rule,
        request.gen_length,
        request.block_length,
        request.seed,
        meta["config"]["max_depth"],
        meta["config"]["max_age"],
    )
    data = SetViews.cat(collected_parts(settings, request, target, run_dir, map_chunks))
    net = load_spot_sets(request.folder)
    calibration = fit_calibration(net, data, tau)
    record = {
        "calibration": asdict(calibration),
        "fit": {
            "examples": data["argmax"].numel(),
            "before": validate(net, data, tau),
            "after": validate(net, data, tau, calibration),
        },
        "provenance": {
            "target": model,
            "family": target.family.name,
            "rule": request.rule,
            "tau": tau,
            "block_length": request.block_length,
            "gen_length": request.gen_length,
            "temperatures": request.temperatures,
            "seed": request.seed,
            "prompts": request.names,
            "checkpoint": request.checkpoint,
            "checkpoint_provenance": meta["provenance"],
            "git_revision": git_revision(),
        },
    }
    request.out.mkdir(parents=True, exist_ok=True)
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        shutil.copyfile(request.folder / name, request.out / name)
    (request.out / CALIBRATION_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return record


def collected_parts(
    settings: Settings, request: Request, target: DLMTarget, run_dir: Path | None, map_chunks: ChunkMap | None
) -> list[SetViews]:
    """The trajectories' examples, collected or read back from `run_dir` (refused if collected with
    other settings), and kept there when collected."""
    jobs = [(name, ids, t) for name, ids in zip(request.names, request.prompts) for t in request.temperatures]
    collection = asdict(settings) | {"prompts": request.names, "temperatures": request.temperatures}
    cache = run_dir / DATA_FILE if run_dir is not None else None
    saved = torch.load(cache, weights_only=False) if cache is not None and cache.exists() else None
    if saved is not None:
        if saved["collection"] != collection:
            raise UserError(
                f"{cache} was collected with other settings (model, rule, prompts, temperatures, lengths, "
                "seed); use a new --run-dir"
            )
        return saved["parts"]
    parts = collect_all(settings, target, jobs, map_chunks)[0]
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        save_state(cache, {"collection": collection, "parts": parts})
    return parts


def fit_calibration(net: SpotSetsNet, data: dict[str, Tensor], tau: float) -> Calibration:
    """The `Calibration` that minimises -log P(the child the target takes) on `data` (examples of the
    target it is for) plus `CALIBRATION_PRIOR`, by L-BFGS in float64 on the network's outputs computed
    once: seven numbers, deterministic."""
    count = data["argmax"].numel()
    with torch.no_grad():
        outputs = [forward(net, data, index, tau) for index in torch.arange(count).split(1024)]
        position, commit, token = (torch.cat([o[i] for o in outputs]).double() for i in range(3))
        rule = rule_inputs(data["candidate"], data["ages"].long(), torch.full((count,), tau))
        gap, odds_gap = (x.double() for x in rule)
    position = position.clamp_min(-1e4)  # -inf / temperature would make the gradient NaN
    index = torch.arange(count)
    values = torch.zeros(7, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([values], lr=0.5, max_iter=200, line_search_fn="strong_wolfe")

    def calibration(v: Tensor) -> Calibration:
        """From (log commit scale, commit bias, commit rule weight, log position temperature, position
        rule weight, log token temperature, top bias)."""
        return Calibration(v[0].exp(), v[1], v[2], v[3].exp(), v[4], v[5].exp(), v[6])

    def closure() -> Tensor:
        optimizer.zero_grad()
        calibrated = calibration(values).apply(position, commit, token, gap, odds_gap)
        loss = cast(Tensor, sum(set_nll(*calibrated, data, index))).mean() + CALIBRATION_PRIOR * values.square().sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return Calibration(*(float(x) for x in dataclasses.astuple(calibration(values.detach()))))

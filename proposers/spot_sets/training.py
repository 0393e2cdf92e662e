"""Training SPOT-Sets on plain threshold trajectories of one target: the recipe, the loss and a resumable
loop with a learning curve (calibrating a checkpoint for another target: `proposers.spot_sets.calibration`);
and `spotbench train-proposer`'s run from a recipe of either SPOT or SPOT-Sets.

The examples come from `proposers.spot_sets.collection`. The loop is SPOT's (`proposers.spot.loop`):
one thread, deterministic by seed, examples drawn with probability `depth_decay ** depth`, generations
held out for validation, `train_state.pt` every `checkpoint_every` steps so a rerun resumes. Additions:
the recipe names its rule (`threshold:TAU`), `init_checkpoint` may be a SPOT checkpoint (its trunk and
position and token heads are SPOT-Sets' own modules, the commit head starts at the stale view's
decision), and every `eval_every` steps the validation metrics are recorded (`curve` in the json).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from harness.errors import UserError
from harness.recipes import Optimizer, load_recipe
from harness.targets.registry import load_dlm_target
from harness.targets.target import DLMTarget
from harness.validation import (
    Count,
    Fraction,
    OptionalSeed,
    Seed,
    Temperatures,
    Text,
    Texts,
    read_mapping,
)
from harness.versions import git_revision
from proposers.spot.collection import ChunkMap, Job, collected, held_out, recipe_jobs
from proposers.spot.features import CONFIDENCE, LOG_ODDS, MASKED, TOP
from proposers.spot.loop import STATE_FILE, Extras, Run, train_steps
from proposers.spot.network import CONFIG_FILE as SPOT_CONFIG_FILE
from proposers.spot.network import SpotConfig, SpotEncoder
from proposers.spot.recipe import OPTIMIZER as SPOT_OPTIMIZER
from proposers.spot.recipe import SpotOptions, SpotRecipe
from proposers.spot.training import checkpoint_at, examples_where
from proposers.spot.training import train as train_spot
from proposers.spot_sets.collection import SetViews, collect_all
from proposers.spot_sets.network import (
    CONFIG_FILE,
    MAX_TAU,
    Calibration,
    SpotSetsNet,
    load_spot_sets,
    predict,
    read_meta,
    save_spot_sets,
    threshold_tau,
)

EVAL_EXAMPLES = 20000
"""Validation examples the learning curve is measured on (every k-th, fixed): the full set at the end."""


@dataclass(frozen=True)
class SpotSetsRecipe:
    name: Text
    target: Text
    rule: Text
    """`threshold:TAU`: the rule whose trajectories are collected and whose tau the network reads."""
    tasks: dict[Text, Count]
    """Task name -> number of train-split prompts (zero-shot)."""
    temperatures: Temperatures = (0.0, 1.0)
    gen_length: Count = 64
    block_length: Count = 32
    seed: Seed = 0
    optimizer: Optimizer = SPOT_OPTIMIZER
    """Steps, minibatch, AdamW, schedule, clipping and checkpoints (`harness.recipes.Optimizer`)."""
    depth_decay: Fraction = 0.85
    """As in `SpotRecipe`: examples drawn with probability depth_decay ** depth (0 is refused)."""
    training_seed: OptionalSeed = None
    init_checkpoint: str | None = None
    """A SPOT or SPOT-Sets checkpoint folder whose weights start the run (same model config)."""
    trainable: Texts | None = None
    """Names (or name prefixes) of the only parameters that train, e.g. [tau_project, commit_head,
    commit_weight]: with a SPOT `init_checkpoint`, the trunk and the argmax and token heads SPOT learned
    from far more generations stay as they are. None: every parameter trains."""
    validation_fraction: Fraction = 0.1
    eval_every: Count = 250
    model: SpotOptions = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperatures", tuple(self.temperatures))
        if threshold_tau(self.rule) is None:
            raise ValueError(
                f"rule must be threshold:TAU with TAU in (0, 1], not {self.rule!r} (SPOT-Sets drafts "
                "the sets of threshold decoding; train SPOT for top1)"
            )
        if self.depth_decay == 0:
            raise ValueError("depth_decay must be in (0, 1], not 0")

    @property
    def tau(self) -> float:
        tau = threshold_tau(self.rule)
        assert tau is not None  # a threshold rule (checked when the recipe is read)
        return tau

    @property
    def max_depth(self) -> int:
        return SpotConfig(**self.model).max_depth

    @property
    def max_age(self) -> int:
        return SpotConfig(**self.model).max_age

    @staticmethod
    def load(path: str | Path) -> SpotSetsRecipe:
        return load_recipe(SpotSetsRecipe, path)


def collection_of(recipe: SpotSetsRecipe) -> dict:
    """The fields that decide what is collected: a run folder's data is reused only by a recipe that
    agrees on all of them."""
    return {
        "target": recipe.target,
        "rule": recipe.rule,
        "tasks": dict(recipe.tasks),
        "temperatures": list(recipe.temperatures),
        "gen_length": recipe.gen_length,
        "block_length": recipe.block_length,
        "seed": recipe.seed,
        "max_depth": recipe.max_depth,
        "max_age": recipe.max_age,
    }


def forward(
    net: nn.Module, data: dict[str, Tensor], index: Tensor, tau: float, calibration: Calibration | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    return predict(
        net,
        calibration,
        data["static"][data["view"][index]],
        data["candidate"][index],
        data["ages"][index].long(),
        data["depth"][index],
        data["temperature"][index],
        torch.full((index.numel(),), tau),
    )


def set_nll(
    position: Tensor, commit: Tensor, token: Tensor, data: dict[str, Tensor], index: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Per example: -log q(argmax), the commit NLL of every other masked position, and the token NLL
    of the committed positions: together -log P(the child the target takes) under the tree's model."""
    argmax, in_set, outcome = data["argmax"][index], data["in_set"][index], data["token"][index].long()
    others = data["ages"][index] == MASKED
    others[torch.arange(index.numel()), argmax] = False
    commit_nll = (
        nn.functional.binary_cross_entropy_with_logits(commit, in_set.float(), reduction="none") * others
    ).sum(1)
    token_nll = -(token.gather(2, outcome.clamp_min(0)[..., None]).squeeze(2) * in_set).sum(1)
    return -position.gather(1, argmax[:, None]).squeeze(1), commit_nll, token_nll


def hits(
    argmax: Tensor, chosen: Tensor, tokens_right: Tensor, data: dict[str, Tensor], index: Tensor
) -> dict[str, int]:
    """How often a predicted argmax, set (`chosen`, [N, B] bool) and set-with-tokens are the target's."""
    masked = data["ages"][index] == MASKED
    in_set = data["in_set"][index]
    set_right = ((chosen == in_set) | ~masked).all(1)
    child_right = set_right & (tokens_right | ~in_set).all(1)
    return {
        "argmax": int((argmax == data["argmax"][index]).sum()),
        "set": int(set_right.sum()),
        "child": int(child_right.sum()),
    }


@torch.no_grad()
def validate(
    net: nn.Module, data: dict[str, Tensor], tau: float, calibration: Calibration | None = None, batch_size: int = 1024
) -> dict[str, float]:
    """Mean NLL and accuracies on `data`: the argmax, the most probable set (argmax plus every position
    whose commit probability is > 1/2), that set with the best tokens (the tree's first child), and
    the same for the stale view's own threshold rule (the confidence-set baseline)."""
    count = data["argmax"].numel()
    total: dict[str, float] = {}
    for start in range(0, count, batch_size):
        index = torch.arange(start, min(count, start + batch_size))
        position, commit, token = forward(net, data, index, tau, calibration)
        parts = set_nll(position, commit, token, data, index)
        masked = data["ages"][index] == MASKED
        argmax = position.argmax(1)
        chosen = ((commit > 0) & masked).scatter(1, argmax[:, None], True)
        outcome = data["token"][index].long()
        found: dict[str, float] = {**hits(argmax, chosen, token.argmax(-1) == outcome, data, index)}
        candidate = data["candidate"][index]
        rule_argmax = candidate[..., CONFIDENCE].masked_fill(~masked, -torch.inf).argmax(1)
        logit_tau = torch.tensor(min(tau, MAX_TAU)).logit().float()
        rule_set = ((candidate[..., LOG_ODDS] >= logit_tau) & masked).scatter(1, rule_argmax[:, None], True)
        found |= {f"rule_{k}": v for k, v in hits(rule_argmax, rule_set, outcome == TOP, data, index).items()}
        found |= {"loss": float(cast(Tensor, sum(parts)).sum())}
        found |= {name: float(part.sum()) for name, part in zip(("position_nll", "commit_nll", "token_nll"), parts)}
        total = {k: total.get(k, 0) + v for k, v in found.items()}
    return {k: v / max(1, count) for k, v in total.items()}


def every_kth(data: dict[str, Tensor], most: int) -> dict[str, Tensor]:
    keep = torch.zeros(data["argmax"].numel(), dtype=torch.bool)
    keep[:: max(1, -(-keep.numel() // most))] = True
    return examples_where(data, keep)


def initial_weights(folder: str, net: SpotSetsNet) -> dict:
    """Loads a SPOT or SPOT-Sets checkpoint's weights into `net` (a SPOT one leaves the tau projection
    and the commit head at their zero start) and returns its record for the provenance."""
    path = Path(folder)
    start: SpotEncoder  # a SPOT-Sets checkpoint, or a SPOT one (the same modules)
    if (path / CONFIG_FILE).exists():
        start, record = load_spot_sets(path), {"folder": folder, "provenance": read_meta(path).get("provenance", {})}
    elif (path / SPOT_CONFIG_FILE).exists():
        start, record = checkpoint_at(folder, "init_checkpoint")
    else:
        raise UserError(
            f"init_checkpoint {folder} holds no SPOT or SPOT-Sets checkpoint; give a folder that "
            "train-proposer --out wrote"
        )
    if start.config != net.config:
        raise UserError(
            f"init_checkpoint {folder} has model {dataclasses.asdict(start.config)}, the recipe "
            f"{dataclasses.asdict(net.config)}; make the recipe's model match it"
        )
    missing, unexpected = net.load_state_dict(start.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {n for n in net.state_dict() if n.startswith(("tau_", "commit_"))}
    return record


def train(
    recipe: SpotSetsRecipe,
    target: DLMTarget,
    jobs: list[Job],
    run_dir: Path,
    out_dir: Path,
    map_chunks: ChunkMap | None = None,
) -> dict:
    """Collect `jobs` (or reuse the run folder's data), train (or resume) and save the checkpoint."""
    config = SpotConfig(**recipe.model)
    torch.manual_seed(recipe.seed if recipe.training_seed is None else recipe.training_seed)
    net = SpotSetsNet(config)
    started_from = initial_weights(recipe.init_checkpoint, net) if recipe.init_checkpoint else None
    parts, sources = collected(
        run_dir,
        collection_of(recipe),
        "target, rule, tasks, temperatures, lengths, seed or depth",
        lambda: collect_all(recipe, target, jobs, map_chunks),
    )
    validation, training = (SetViews.cat(chosen) for chosen in held_out(parts, recipe.seed, recipe.validation_fraction))
    probe = every_kth(validation, EVAL_EXAMPLES)
    training_seed = recipe.seed if recipe.training_seed is None else recipe.training_seed
    names = [name for name, _ in net.named_parameters()]
    unknown = [prefix for prefix in recipe.trainable or () if not any(n.startswith(prefix) for n in names)]
    if unknown:
        raise UserError(f"trainable names no parameter: {', '.join(unknown)}; parameters: {', '.join(names)}")
    for name, parameter in net.named_parameters():
        parameter.requires_grad_(recipe.trainable is None or name.startswith(tuple(recipe.trainable)))
    trained = [p for p in net.parameters() if p.requires_grad]
    curve: list[dict] = []

    def start(state: dict | None, step: int) -> None:
        curve[:] = state["curve"] if state is not None else []
        if step == 0:
            curve[:] = [{"step": 0} | validate(net.eval(), probe, recipe.tau)]

    def after_step(step: int) -> None:
        if step % recipe.eval_every == 0 or step == recipe.optimizer.steps:
            curve.append({"step": step} | validate(net.eval(), probe, recipe.tau))
            net.train()

    step = train_steps(
        recipe,
        Run(net, trained, training_seed, run_dir / STATE_FILE, Extras(start, after_step, lambda: {"curve": curve})),
        training["depth"],
        lambda index: cast(Tensor, sum(set_nll(*forward(net, training, index, recipe.tau), training, index))).mean(),
    )
    report = {
        "recipe": dataclasses.asdict(recipe),
        "provenance": {
            "target": recipe.target,
            "rule": recipe.rule,
            "tau": recipe.tau,
            "data": sorted({s.split("/")[0] + "/train" for s in sources}),
            "generations": len(sources),
            "seed": recipe.seed,
            "training_seed": training_seed,
            "init_checkpoint": started_from,
            "git_revision": git_revision(),
        },
        "examples": {"train": training["argmax"].numel(), "validation": validation["argmax"].numel()},
        "validation": validate(net, validation, recipe.tau),
        "validation_depths_0_3": validate(net, examples_where(validation, validation["depth"] < 4), recipe.tau),
        "curve": curve,
        "steps": step,
    }
    save_spot_sets(net, out_dir, report)
    return report


def load_spot_family_recipe(path: str | Path, steps: int | None = None) -> SpotRecipe | SpotSetsRecipe:
    """The recipe at `path` (`--steps` overriding its steps): SPOT-Sets' if it names a rule
    (threshold decoding), SPOT's otherwise."""
    kind: type[SpotRecipe] | type[SpotSetsRecipe] = (
        SpotSetsRecipe if "rule" in read_mapping(path, "recipe") else SpotRecipe
    )
    return load_recipe(kind, path, {"steps": steps})


PromptsOf = Callable[[dict[str, int], Any], list[tuple[str, list[int]]]]
"""(task -> prompt count, tokenizer) -> (source, prompt ids) of train-split prompts: the caller's,
since the library knows no task (`tasks.registry.train_prompts`)."""


def train_from_recipe(
    recipe: SpotRecipe | SpotSetsRecipe,
    prompts_of: PromptsOf,
    run_dir: Path,
    out_dir: Path,
    map_chunks: ChunkMap | None = None,
) -> dict:
    """`spotbench train-proposer`: the recipe's target loaded, its generations listed from the
    caller's prompts, then SPOT or SPOT-Sets trained (collection through `map_chunks` if given)."""
    target = load_dlm_target(recipe.target, what="SPOT")
    jobs = recipe_jobs(recipe, prompts_of(dict(recipe.tasks), target.tokenizer))
    if isinstance(recipe, SpotSetsRecipe):
        return train(recipe, target, jobs, run_dir, out_dir, map_chunks)
    return train_spot(recipe, target, jobs, run_dir, out_dir, map_chunks)

"""Collecting SPOT's training examples: plain decoding of a target's training prompts, reduced to
what the proposer may see.

Per pass only features are kept (top-k summary of the logits and the candidate features at each
future depth's noise), never full logits, plus the committed position and token. An example at
depth d is what the proposer sees at a tree node d commits below the root: the stale view of the
pass before the root, the positions committed up to the root, the d hypothesized commits since,
and as labels the position the target commits next and whether it commits the stale candidate
there, the runner-up or neither. Full-attention targets also yield the block-start view (the
`following` logits).

Generation k decodes with seed `recipe.seed + k` whichever process runs it, so where the chunks run
(here, or as Ray tasks through the caller's map function) changes how long the collection takes,
never what it collects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor
from tqdm import tqdm

from harness.decoding import DecodeConfig, NoiseSource, parse_rule, plain_decode
from harness.errors import UserError
from harness.targets.target import DLMTarget
from harness.training.loop import save_state
from proposers.spot.features import NEITHER, RUNNER_UP, TOP, StaleView, candidates, commit, root_ages, static_features
from proposers.spot.network import SpotConfig
from proposers.spot.recipe import SpotRecipe

DATA_FILE = "trajectories.pt"
"""The collected examples in a run folder (`collected`), reused by a run of the same collection."""
CHUNK = 16
"""Generations per Ray task: large enough to amortise a task, small enough to keep every worker busy."""


@dataclass
class Views:
    """The stale views of one generation and the examples they yield (tensors, stackable)."""

    static: Tensor
    """[views, B, S] per view."""
    view: Tensor
    """[examples] the view each example reads."""
    candidate: Tensor
    """[examples, B, C] candidate features at the example's depth."""
    ages: Tensor
    """[examples, B] commit ages at the example's node (see proposers.spot.network)."""
    depth: Tensor
    label: Tensor
    """[examples] the position the target commits next."""
    token: Tensor
    """[examples] which stale candidate it commits there (TOP, RUNNER_UP or NEITHER)."""
    temperature: float

    @staticmethod
    def cat(parts: list[Views]) -> dict[str, Tensor]:
        return cat_views(parts, ("static", "candidate", "ages", "depth", "label", "token"))


def cat_views(parts: list, fields: tuple[str, ...]) -> dict[str, Tensor]:
    """Generations' views (`Views`, `SetViews`) as one data set: each field concatenated, `view`
    re-indexed into the concatenated views, and every example's temperature."""
    offsets = torch.tensor([0] + [p.static.shape[0] for p in parts]).cumsum(0)
    data = {name: torch.cat([getattr(p, name) for p in parts]) for name in fields}
    data["view"] = torch.cat([p.view + offsets[i] for i, p in enumerate(parts)])
    data["temperature"] = torch.cat([torch.full((p.view.numel(),), p.temperature) for p in parts])
    return data


@torch.no_grad()
def collect(
    target: DLMTarget,
    prompt_ids: list[int],
    gen_length: int,
    block_length: int,
    temperature: float,
    seed: int,
    config: SpotConfig,
) -> tuple[Views, list[int]]:
    """Plain top1 decoding of one prompt; returns its examples and the committed positions."""
    rule = parse_rule("top1", target.family, target.mask_id)
    plain = plain_decode(
        target, prompt_ids, DecodeConfig(rule, gen_length, block_length, temperature, seed), keep_logits=True
    )
    noise = NoiseSource(seed, block_length, target.vocab_size) if temperature > 0 else None
    mask_id = target.mask_id
    positions = [t.positions[0] for t in plain.steps]
    tokens = [t.tokens[0] for t in plain.steps]
    statics, pending = [], []  # pending: (view, stale, root commits, root step, block, tokens, prefilled)
    following, pass_logits = plain.following, plain.pass_logits
    assert following is not None and pass_logits is not None  # decoded with keep_logits
    for span in plain.blocks(mask_id):  # top1: one step per position
        block, block_tokens = positions[span.first : span.end], tokens[span.first : span.end]
        prefilled = (span.start != mask_id).long()  # the prompt's tail, on the absolute block grid
        previous = following[span.index - 1] if span.index else None
        views = [] if previous is None else [(previous, 0, span.first)]
        views += [(pass_logits[span.first + j], j + 1, span.first + j + 1) for j in range(len(block) - 2)]
        for logits, root_commits, root_step in views:
            stale = StaleView.of(logits, temperature, mask_id)
            statics.append(static_features(stale))
            pending.append((len(statics) - 1, stale, root_commits, root_step, block, block_tokens, prefilled))
    view_ids, cands, ages_list, depths, labels, outcomes = [], [], [], [], [], []
    for view, stale, root_commits, root_step, block, tokens, prefilled in pending:
        drafted = None
        for depth in range(min(config.max_depth, len(block) - root_commits - 1)):
            if drafted is None or noise:
                drafted = candidates(stale, noise(root_step + depth) if noise else None, rule)
            root = prefilled.clone()  # 0 stands for the mask here
            root[block[:root_commits]] = 1
            ages = root_ages(root, 0, tuple(block[:root_commits]), config.max_age)
            for position in block[root_commits : root_commits + depth]:
                ages = commit(ages, position)
            label, token = block[root_commits + depth], tokens[root_commits + depth]
            view_ids.append(view)
            cands.append(drafted.features)
            ages_list.append(ages)
            depths.append(depth)
            labels.append(label)
            outcomes.append(
                TOP if drafted.tokens[label] == token else RUNNER_UP if drafted.runner_up[label] == token else NEITHER
            )
    collected = Views(
        torch.stack(statics),
        torch.tensor(view_ids),
        torch.stack(cands),
        torch.stack(ages_list).to(torch.int8),
        torch.tensor(depths),
        torch.tensor(labels),
        torch.tensor(outcomes, dtype=torch.int8),
        temperature,
    )
    return collected, positions


def collection_of(recipe: SpotRecipe) -> dict:
    """The recipe's fields that decide what `collect_all` collects: a run folder's data is reused only
    by a recipe that agrees on all of them (steps, batches or `training_seed` may differ)."""
    config = SpotConfig(**recipe.model)
    return {
        "target": recipe.target,
        "tasks": dict(recipe.tasks),
        "temperatures": list(recipe.temperatures),
        "gen_length": recipe.gen_length,
        "block_length": recipe.block_length,
        "seed": recipe.seed,
        "max_depth": config.max_depth,
        "max_age": config.max_age,
    }


P = TypeVar("P")
"""A collected part: one generation's `Views` (SPOT) or `SetViews` (SPOT-Sets)."""
Job = tuple[str, list[int], float]
"""(source, prompt ids, temperature) of one generation. The caller builds the jobs from train-split
prompts (`spotbench train-proposer`), so this module needs no task registry."""

ChunkMap = Callable[[Callable[..., list[Any]], Sequence[int], tuple], Iterable[list[Any]]]
"""`map_chunks(fn, firsts, shared)`: `fn(first, *shared)` for every chunk, results in order (e.g.
`cluster.ordered.map_in_order` with its workers bound). The caller chooses where chunks run."""


class Sampled(Protocol):
    """A recipe's sampling temperatures (`SpotRecipe`, `SpotSetsRecipe`)."""

    @property
    def temperatures(self) -> Sequence[float]: ...


def recipe_jobs(recipe: Sampled, prompts: list[tuple[str, list[int]]]) -> list[Job]:
    """Every (prompt, temperature) generation of the recipe, in a fixed order: prompt by prompt,
    temperature by temperature (`prompts`: (source, ids) of the recipe's train-split prompts)."""
    return [(source, ids, temperature) for source, ids in prompts for temperature in recipe.temperatures]


def collect_jobs(recipe: SpotRecipe, target: DLMTarget, first: int, jobs: list[Job]) -> list[Views]:
    """Generations `first`, `first + 1`, ... of the recipe: generation k decodes with seed `recipe.seed + k`."""
    config = SpotConfig(**recipe.model)
    return [
        collect(target, ids, recipe.gen_length, recipe.block_length, temperature, recipe.seed + first + k, config)[0]
        for k, (_, ids, temperature) in enumerate(jobs)
    ]


def collect_chunk(first: int, recipe: SpotRecipe, jobs: list[Job]) -> list[Views]:
    """One chunk, loading the recipe's target where it runs (a model does not travel as an argument)."""
    from harness.targets.registry import load_dlm_target

    return collect_jobs(recipe, load_dlm_target(recipe.target, what="SPOT"), first, jobs[first : first + CHUNK])


def collect_all(
    recipe: SpotRecipe, target: DLMTarget, jobs: list[Job], map_chunks: ChunkMap | None = None
) -> tuple[list[Views], list[str]]:
    """Every generation of `jobs`, in job order, and their sources (`task/train/i@T=t`). Chunks of
    CHUNK generations run here, or through `map_chunks` (which then loads the target itself)."""
    return collect_in_chunks(collect_jobs, collect_chunk, recipe, target, jobs, map_chunks)


def collect_in_chunks(
    collect_jobs: Callable[..., list[P]],
    collect_chunk: Callable[..., list[P]],
    settings: object,
    target: DLMTarget,
    jobs: list[Job],
    map_chunks: ChunkMap | None,
) -> tuple[list[P], list[str]]:
    """The chunked collection of SPOT and SPOT-Sets: `collect_jobs(settings, target, first, jobs)` on
    each chunk here, or `collect_chunk(first, settings, jobs)` through `map_chunks`; the parts in job
    order and the jobs' sources."""
    sources = [f"{source}@T={temperature:g}" for source, _, temperature in jobs]
    firsts = list(range(0, len(jobs), CHUNK))
    if map_chunks is None:
        chunks: Iterable[list[P]] = (collect_jobs(settings, target, f, jobs[f : f + CHUNK]) for f in firsts)
    else:
        chunks = map_chunks(collect_chunk, firsts, (settings, jobs))
    parts: list[P] = []
    with tqdm(total=len(jobs), desc="collect", unit="gen") as bar:
        for chunk in chunks:
            parts += chunk
            bar.update(len(chunk))
    return parts, sources


def collected(
    run_dir: Path, collection: dict, settings: str, collect: Callable[[], tuple[list[P], list[str]]]
) -> tuple[list[P], list[str]]:
    """The run folder's collected parts and sources if it holds data of the same `collection`
    (`collection_of`), else `collect()`'s, saved there first. `settings` names the collection's
    fields in the refusal."""
    run_dir.mkdir(parents=True, exist_ok=True)
    data_path = run_dir / DATA_FILE
    if data_path.exists():
        saved = torch.load(data_path, weights_only=False)
        if saved.get("collection") != collection:
            raise UserError(f"{data_path} was collected for another {settings} than this recipe's; use a new --run-dir")
        return saved["parts"], saved["sources"]
    parts, sources = collect()
    save_state(data_path, {"collection": collection, "parts": parts, "sources": sources})
    return parts, sources


def held_out(parts: list[P], seed: int, fraction: float) -> tuple[list[P], list[P]]:
    """(validation, training) parts: a `fraction` of the generations (at least one), drawn by `seed`."""
    split = torch.randperm(len(parts), generator=torch.Generator().manual_seed(seed))
    held = max(1, int(len(parts) * fraction))
    return [parts[i] for i in split[:held].tolist()], [parts[i] for i in split[held:].tolist()]

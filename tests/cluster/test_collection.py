"""SPOT's training data collected through Ray (`map_in_order` as the collection's map function) is
exactly what one process collects, locally and on an existing cluster."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from cluster.ordered import map_in_order
from harness.targets.registry import load_target
from proposers.spot.collection import collect_all, recipe_jobs
from proposers.spot.recipe import SpotRecipe
from tasks.registry import train_prompts

pytestmark = pytest.mark.slow


def recipe_and_jobs(prompts: int, seed: int = 0):
    recipe = SpotRecipe(
        name="t",
        target="tiny-random:sdar",
        tasks={"arith": prompts},
        temperatures=(0.0, 1.0),
        gen_length=16,
        block_length=8,
        model={"max_depth": 5},
        seed=seed,
    )
    target = load_target(recipe.target)
    return recipe, target, recipe_jobs(recipe, train_prompts(recipe.tasks, target.tokenizer))


def test_ray_workers_collect_exactly_what_one_process_collects():
    recipe, target, jobs = recipe_and_jobs(20)
    alone, sources = collect_all(recipe, target, jobs)
    assert len(alone) == 40 > 2 * 16  # more generations than two workers' first chunks
    together, same_sources = collect_all(recipe, target, jobs, functools.partial(map_in_order, workers=2))
    assert same_sources == sources and sources[:2] == ["arith/train/0@T=0", "arith/train/0@T=1"]
    for one, other in zip(alone, together):
        assert (
            all(
                torch.equal(getattr(one, f.name), getattr(other, f.name))
                for f in dataclasses.fields(one)
                if f.name != "temperature"
            )
            and one.temperature == other.temperature
        )
    reseeded_recipe = dataclasses.replace(recipe, seed=1)
    reseeded = collect_all(reseeded_recipe, target, jobs, functools.partial(map_in_order, workers=2))[0]
    assert any(not torch.equal(a.candidate, b.candidate) for a, b in zip(alone, reseeded) if a.temperature > 0)


def test_an_address_sends_the_collection_to_that_ray_cluster(monkeypatch):
    import ray

    from proposers.spot import collection as spot_collection

    recipe, target, jobs = recipe_and_jobs(10)
    alone = collect_all(recipe, target, jobs)[0]
    ray.init(
        address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20
    )  # never a stray cluster of the machine
    try:
        # the driver may not collect: only the cluster's workers (a fresh import there) can
        monkeypatch.setattr(spot_collection, "collect_jobs", lambda *args: pytest.fail("collected in the driver"))
        address = ray.get_runtime_context().gcs_address
        remote = collect_all(recipe, target, jobs, functools.partial(map_in_order, address=address))[0]
        assert ray.is_initialized()  # a cluster the caller started stays up
    finally:
        ray.shutdown()
    assert all(torch.equal(a.candidate, b.candidate) and torch.equal(a.label, b.label) for a, b in zip(alone, remote))
    assert len(remote) == len(alone) == 20

"""SPOT's training recipe (`spotbench train-proposer RECIPE`): what to collect and how to train.

Read by the collection (proposers/spot/collection.py: which target, prompts, temperatures and
lengths) and by the training loop (proposers/spot/training.py: steps, optimizer, initialization,
averaging, distillation). Committed recipes live next to their checkpoints under zoo/proposers/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from harness.recipes import Optimizer, load_recipe
from harness.validation import (
    Count,
    Fraction,
    OptionalSeed,
    Seed,
    Temperatures,
    Text,
    options_check,
)
from proposers.spot.network import SpotConfig

SpotOptions = Annotated[dict, options_check(SpotConfig)]
"""A recipe's `model:` mapping: `SpotConfig` fields."""


OPTIMIZER = Optimizer(steps=1500, batch_size=256, warmup_steps=100, weight_decay=0.01, checkpoint_every=250)
"""A SPOT step draws 256 examples (tree nodes); warmup 100 steps, a checkpoint every 250."""


@dataclass(frozen=True)
class SpotRecipe:
    name: Text
    target: Text
    tasks: dict[Text, Count]
    """Task name -> number of train-split prompts (zero-shot)."""
    temperatures: Temperatures = (0.0, 1.0)
    gen_length: Count = 64
    block_length: Count = 32
    seed: Seed = 0
    optimizer: Optimizer = OPTIMIZER
    """Steps, minibatch, AdamW, schedule, clipping and checkpoints (`harness.recipes.Optimizer`)."""
    depth_decay: float = 1.0
    """Examples are drawn with probability proportional to depth_decay ** depth. Every tree path starts
    at depth 0 and a node's share of the walk falls with its depth, while a view yields up to
    `max_depth` examples, most of them deep; below 1 this spends the steps where the tree is."""
    training_seed: OptionalSeed = None
    """Seeds the network's initialization and the order of examples; None means `seed`. The collected
    data and the validation split depend on `seed` alone, so recipes that differ only here train on
    one collection (link its trajectories.pt into each run folder) and measure the spread between
    training runs apart from the data."""
    init_checkpoint: str | None = None
    """A SPOT checkpoint folder whose weights start the run instead of a random initialisation
    (fine-tuning; its model config must be the recipe's). Provenance records it."""
    average_from: int | None = None
    """From this step on the learning rate stays at its value there and the checkpoint is the
    average of the weights after every later step (stochastic weight averaging): an ensemble along
    one run at no inference cost. The registry's `spot` is averaged (docs/spot.md, Design choices)."""
    teachers: tuple[str, ...] = ()
    """SPOT checkpoint folders whose ensemble (`SpotEnsemble`) is a soft label: distillation, so that
    one network of the usual size learns what an ensemble of training runs knows."""
    distill_weight: float = 0.5
    """With teachers, the loss is (1 - w) * the recorded commits' NLL + w * the cross-entropy from
    the teachers' mixture over (next position, token outcome), the pair whose probability the tree
    multiplies along a path."""
    validation_fraction: Fraction = 0.1
    model: SpotOptions = field(default_factory=dict)
    """`SpotConfig` fields."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperatures", tuple(self.temperatures))
        object.__setattr__(self, "teachers", tuple(self.teachers))
        if not 0 < self.depth_decay <= 1:
            raise ValueError(f"depth_decay must be in (0, 1], not {self.depth_decay}")
        if self.average_from is not None and not 0 <= self.average_from < self.optimizer.steps:
            raise ValueError(
                f"average_from must be a step in [0, steps) = [0, {self.optimizer.steps}), not {self.average_from}"
            )
        if not 0 <= self.distill_weight <= 1:
            raise ValueError(f"distill_weight must be in [0, 1], not {self.distill_weight}")

    @staticmethod
    def load(path: str | Path) -> SpotRecipe:
        return load_recipe(SpotRecipe, path)

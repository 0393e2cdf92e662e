"""SPOT's network: `SpotNet`, a small transformer over the block positions (~0.6M parameters).

It reads only features of the target's stale view and of the tree node (proposers/spot/features.py:
top-k probabilities, entropy, margin, the coupled-noise candidate's log-probabilities and log-odds
and its runner-up's log-confidence at this depth, its confidence rank and gaps to the best masked
position, where it sits relative to the latest commits, the block's latest real commit, which the
one-commit-old stale view has not seen, and the path of commits already hypothesized on the current
tree branch), and outputs a distribution over the next committed position and, per position,
whether the target will commit the stale candidate there, the runner-up, or neither. Its inputs
never contain token ids, the vocabulary size or the absolute position, so one checkpoint runs on any
target and block length (transfer). Also here: ensembles of networks and checkpoint folders.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from harness.bundled import ZOO_DIR
from proposers.spot.features import CANDIDATE_FEATURES, GAP_SCALE, MASKED, NODE_FEATURES, STATIC_FEATURES, node_features
from proposers.spot.kernels import encoder_layers, fused_path

WEIGHTS_FILE = "spot.safetensors"
CONFIG_FILE = "spot.json"
DEFAULT_CHECKPOINT = "spot-sdar-a-grid"
"""The registry's `spot`: the zoo checkpoint trained on sdar-a, last on its absolute block grid
(zoo/proposers/, docs/spot.md)."""


@dataclass(frozen=True)
class SpotConfig:
    width: int = 128
    layers: int = 3
    heads: int = 4
    ffn: int = 512
    max_depth: int = 16
    """Deepest tree node of the training examples; depths are fed divided by it."""
    max_age: int = 16
    """Commits older than this share one age embedding."""


class SpotEncoder(nn.Module):
    """The layers SPOT and SPOT-Sets share (inputs, encoder, position and token heads) and the
    encoder pass (`encode`); each network adds its own `forward` (and SPOT-Sets its own heads)."""

    def __init__(self, config: SpotConfig):
        super().__init__()
        self.config = config
        self.project = nn.Linear(STATIC_FEATURES + CANDIDATE_FEATURES + 2 + NODE_FEATURES, config.width)
        self.age = nn.Embedding(config.max_age + 2, config.width)
        layer = nn.TransformerEncoderLayer(
            config.width, config.heads, config.ffn, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, 1)
        self.token_head = nn.Linear(config.width, 3)
        self.confidence_weight = nn.Parameter(torch.tensor(1.0))

    def encode(
        self,
        static: Tensor,
        candidate: Tensor,
        ages: Tensor,
        depth: Tensor,
        temperature: Tensor,
        extra: Tensor | None = None,
        masked_only: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """The encoder's output [N, B, width] and the position head's log-probabilities [N, B];
        `extra` [N, B, width] is added to the input projection (SPOT-Sets' tau features). In
        inference the encoder's fused kernels are called directly (`encoder_layers`, same values),
        and with `masked_only` its output is unspecified at committed positions."""
        n, size = ages.shape
        scalars = torch.stack([depth.float() / self.config.max_depth, temperature.float()], -1)
        node = node_features(candidate, ages, depth)
        x = torch.cat([static, candidate, scalars[:, None].expand(n, size, 2), node], -1)
        h = self.project(x) if extra is None else self.project(x) + extra
        h = h + self.age((ages + 1).clamp_max(self.config.max_age + 1))
        if self.training or not fused_path():
            h = self.encoder(h)
        else:
            h = encoder_layers(self.encoder, h, ages == MASKED if masked_only else None)
        h = self.norm(h)
        logits = self.head(h).squeeze(-1) + self.confidence_weight * node[..., 0] * GAP_SCALE
        return h, logits.masked_fill(ages != MASKED, -math.inf).log_softmax(-1)


class SpotNet(SpotEncoder):
    """Per position features + commit ages -> the next committed position and, per position, which
    stale candidate the target commits there if it commits it next (TOP, RUNNER_UP or NEITHER).

    No position embedding: the encoder is permutation-equivariant over the block, so the network
    runs on any block length, and where a position is comes only from its relation to committed
    ones (`node_features`). The position output adds the network's score to the log-confidence gap
    (`confidence_weight`, starts at 1): an untrained network ranks like the confidence proposer
    and training learns the correction. The token head is what makes a path's probability the
    probability that the verifier walks it: the stale token goes wrong with depth (at T=1 on GSM8K
    one committed position in eight is not the one-pass-old candidate), and where it does the
    runner-up is often right.
    """

    def forward(
        self,
        static: Tensor,
        candidate: Tensor,
        ages: Tensor,
        depth: Tensor,
        temperature: Tensor,
        masked_only: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """static [N, B, S], candidate [N, B, C], ages [N, B], depth [N], temperature [N]
        -> [N, B] log-probabilities of the next committed position (-inf where not masked), and
        [N, B, 3] log-probabilities of TOP / RUNNER_UP / NEITHER at each position; with
        `masked_only`, the token head's output at committed positions is unspecified (the tree
        search reads only masked ones, and skips work for the others: proposers/spot/kernels.py)."""
        h, position = self.encode(static, candidate, ages, depth, temperature, masked_only=masked_only)
        return position, self.token_head(h).log_softmax(-1)


def joint_logp(position_logp: Tensor, token_logp: Tensor) -> Tensor:
    """[N, B, 3] log P(next position, token outcome there): the factor a tree child multiplies in."""
    return position_logp[..., None] + token_logp


class SpotEnsemble(nn.Module):
    """Several SPOT networks as one: the mixture of their joint distributions over (next position,
    token outcome), returned as SpotNet's two outputs (the marginal over positions and the token
    outcome given the position).

    Why: averaging independently trained runs saved 1-3% more passes than each of them, and
    distillation (`SpotRecipe.teachers`) trains one network on this mixture (docs/spot.md).
    """

    def __init__(self, nets: list[SpotNet]):
        super().__init__()
        if len({net.config.max_age for net in nets}) != 1:
            raise ValueError("ensemble members must share max_age: the proposer dates commits once for all")
        self.nets = nn.ModuleList(nets)
        self.config = nets[0].config

    def forward(self, *inputs: Tensor, masked_only: bool = False) -> tuple[Tensor, Tensor]:
        positions, tokens = zip(*(net(*inputs, masked_only=masked_only) for net in self.nets))
        log_count = math.log(len(self.nets))
        position = torch.stack(positions).logsumexp(0) - log_count
        joint = torch.stack([joint_logp(p, t) for p, t in zip(positions, tokens)]).logsumexp(0) - log_count
        committed_anyway = torch.stack(tokens).logsumexp(0) - log_count  # positions no member can pick
        return position, torch.where(position[..., None].isfinite(), joint - position[..., None], committed_anyway)


def save_net(net: SpotEncoder, folder: Path, weights_file: str, config_file: str, meta: dict) -> None:
    """A checkpoint folder of SPOT or SPOT-Sets: the weights (safetensors) and a JSON record of the
    model config, the parameter count and `meta`."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(folder / weights_file))
    meta = {"config": asdict(net.config), "parameters": sum(p.numel() for p in net.parameters())} | meta
    (folder / config_file).write_text(json.dumps(meta, indent=2) + "\n")


def save_spot(net: SpotNet, folder: Path, provenance: dict) -> None:
    save_net(net, folder, WEIGHTS_FILE, CONFIG_FILE, provenance)


def load_spot(folder: str | Path) -> SpotNet:
    folder = Path(folder)
    meta = json.loads((folder / CONFIG_FILE).read_text())
    net = SpotNet(SpotConfig(**meta["config"]))
    net.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
    return net.eval()


@functools.cache
def zoo_spot(name: str = DEFAULT_CHECKPOINT) -> SpotNet:
    """A committed checkpoint under zoo/proposers/, loaded once per process."""
    return load_spot(ZOO_DIR / "proposers" / name)

"""SPOT: a learned proposer of the order in which the target commits positions (DESIGN.md section 1).

The target's stale view (its previous pass over the block) already holds the right token at most
positions; what is hard to guess is the *order*. `SpotNet`, a small transformer over the B block
positions (~0.6M parameters), reads only features of the stale view (per position: top-k
probabilities, entropy, margin, the coupled-noise candidate's log-probabilities at this depth, its
confidence rank and gap to the best masked position), where it sits relative to committed positions
and the path of commits already hypothesized on the current tree branch, and outputs a distribution
over the next committed position. Its inputs never contain token ids, the vocabulary size or the
absolute position, so one checkpoint runs on any target and block length (transfer).

`SpotProposer` grows a general tree best-first by cumulative path probability up to the budget. The
token at a drafted position is the stale view's candidate under the same rule as the target's
(`argmax(logit/T + G(seed, s + depth))`, mask excluded), so with coupled noise a right order is
accepted at any temperature. The verifier decides what is committed, so SPOT is lossless by
construction whatever the network outputs.

Scope: SPOT orders single commits, i.e. the `top1` rule. Under a threshold rule a node commits a set;
there SPOT delegates to the confidence chain (the rule simulated on the stale logits), and SPOT-Sets
is left to its own proposer. Without a stale view (first pass of a block on block-causal targets) it
drafts nothing.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from harness.decoding import DraftNode, DraftRequest, DraftTree, Transition
from harness.decoding.rules import Rule, greedy_tokens
from harness.targets.zoo import ZOO_DIR
from proposers.confidence import ConfidenceProposer

TOP_K = 8
STATIC_FEATURES = TOP_K + 3
"""Per position, independent of depth: top-k probabilities, entropy, margin, log top-1 probability."""
CANDIDATE_FEATURES = 4
"""Per position and depth: the candidate's log-confidence by the rule's convention, its untempered and
tempered log-probabilities, and whether it equals the greedy token."""
LOG_FLOOR = -30.0
WEIGHTS_FILE = "spot.safetensors"
CONFIG_FILE = "spot.json"
DEFAULT_CHECKPOINT = "spot-sdar-a"
"""The registry's `spot`: the zoo checkpoint trained on sdar-a (zoo/proposers/)."""
SUPPORTED_CONFIDENCE = ("prob", "tempered_prob")
"""Conventions whose log-confidence is a candidate log-probability (every zoo and published family)."""


def static_features(stale: Tensor) -> Tensor:
    """[B, STATIC_FEATURES] float32 summary of the stale logits [B, V], computed in float64."""
    logp = stale.double().log_softmax(-1)
    probs = logp.exp()
    top = probs.topk(TOP_K, dim=-1).values
    entropy = -(probs * logp).sum(-1, keepdim=True)
    margin = top[:, :1] - top[:, 1:2]
    return torch.cat([top, entropy, margin, top[:, :1].log().clamp_min(LOG_FLOOR)], -1).float()


def candidates(stale: Tensor, noise: Tensor | None, temperature: float, rule: Rule) -> tuple[Tensor, Tensor]:
    """The rule's candidate token at every position at one depth, and its features [B, 4].

    Same candidate as `harness.decoding.rules` (float64, mask excluded, ties to the lowest id), so a
    drafted token is the one the target commits whenever the stale view is still right there.
    """
    if rule.confidence not in SUPPORTED_CONFIDENCE:
        raise ValueError(f"SPOT features need a probability confidence, not {rule.confidence!r}")
    x = stale.double()
    greedy = greedy_tokens(x, rule.mask_id)
    if temperature > 0:
        if noise is None:
            raise ValueError("sampling at T>0 needs Gumbel noise")
        tokens = greedy_tokens(x / temperature + noise.to(x.device), rule.mask_id)
        tempered = (x / temperature).log_softmax(-1).gather(-1, tokens[:, None]).squeeze(1)
    else:
        tokens = greedy
    plain = x.log_softmax(-1).gather(-1, tokens[:, None]).squeeze(1)
    if temperature <= 0:
        tempered = plain
    confidence = plain if rule.confidence == "prob" else tempered
    features = torch.stack([confidence, plain, tempered], -1).clamp_min(LOG_FLOOR)
    features = torch.cat([features, (tokens == greedy).double()[:, None]], -1)
    return tokens.cpu(), features.float().cpu()


@dataclass(frozen=True)
class SpotConfig:
    width: int = 128
    layers: int = 3
    heads: int = 4
    ffn: int = 512
    max_depth: int = 16
    """Path depths beyond this share the last order embedding."""


ORDER_MASKED, ORDER_BEFORE_ROOT = 0, 1
"""Order codes per position: masked at the node, committed at or before the root, else 2 + depth."""
EXPAND = -1
NODE_FEATURES = 9
GAP_SCALE = 10.0
"""Log-confidence gaps are clamped to -GAP_SCALE nats and divided by it."""


def node_features(candidate: Tensor, order: Tensor, depth: Tensor) -> Tensor:
    """[N, B, NODE_FEATURES]: each position relative to the rest of the block at one tree node.

    Why relative: absolute positions and confidence levels are calibrated to the target the network
    was trained on (a position embedding learned sdar-a's own order and lost to plain confidence on
    every other zoo target, docs/spot.md); how a position ranks against the other masked ones and
    where it sits next to what is already committed carries over. Features: log-confidence gap to
    the best masked position (the rule's `prob` convention, column 0 of `candidate`), is-best, rank,
    fraction of the block still masked, left / right neighbour committed (the block's left edge
    counts as committed), leftmost masked, adjacent to and distance from this branch's last commit.
    """
    masked = order == ORDER_MASKED
    score = candidate[..., 0].masked_fill(~masked, -math.inf)
    best = score.max(-1, keepdim=True).values
    gap = (score - best).nan_to_num(0.0).clamp_min(-GAP_SCALE).masked_fill(~masked, 0.0)
    rank = (score[..., None, :] > score[..., :, None]).sum(-1).clamp_max(7).masked_fill(~masked, 7)
    committed = ~masked
    left = nn.functional.pad(committed, (1, 0), value=True)[..., :-1]
    right = nn.functional.pad(committed, (0, 1), value=False)[..., 1:]
    leftmost = masked & (masked.cumsum(-1) == 1)
    positions = torch.arange(order.shape[-1], device=order.device)
    last = (order == (depth[:, None] + 1)).float().argmax(-1, keepdim=True)
    distance = torch.where(depth[:, None] > 0, (positions[None] - last).abs().clamp_max(8), 8)
    fraction = masked.float().mean(-1, keepdim=True).expand_as(gap)
    return torch.stack([gap / GAP_SCALE, (rank == 0).float(), rank / 7, fraction, left.float(), right.float(),
                        leftmost.float(), (distance == 1).float(), distance / 8], -1)


class SpotNet(nn.Module):
    """Per position features + path order -> the next committed position.

    No position embedding: the encoder is permutation-equivariant over the block, so the network
    runs on any block length, and where a position is comes only from its relation to committed
    ones (`node_features`). The output adds the network's score to the log-confidence gap
    (`confidence_weight`, starts at 1): an untrained network ranks like the confidence proposer
    and training learns the correction.
    """

    def __init__(self, config: SpotConfig):
        super().__init__()
        self.config = config
        self.project = nn.Linear(STATIC_FEATURES + CANDIDATE_FEATURES + 2 + NODE_FEATURES, config.width)
        self.order = nn.Embedding(config.max_depth + 2, config.width)
        layer = nn.TransformerEncoderLayer(
            config.width, config.heads, config.ffn, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, 1)
        self.confidence_weight = nn.Parameter(torch.tensor(1.0))

    def forward(self, static: Tensor, candidate: Tensor, order: Tensor, depth: Tensor, temperature: Tensor
                ) -> Tensor:
        """static [N, B, S], candidate [N, B, C], order [N, B] (codes), depth [N], temperature [N]
        -> [N, B] log-probabilities of the next committed position (-inf where not masked)."""
        n, size = order.shape
        scalars = torch.stack([depth.float() / self.config.max_depth, temperature.float()], -1)
        node = node_features(candidate, order, depth)
        x = torch.cat([static, candidate, scalars[:, None].expand(n, size, 2), node], -1)
        h = self.project(x) + self.order(order.clamp_max(self.config.max_depth + 1))
        logits = self.head(self.norm(self.encoder(h))).squeeze(-1) + self.confidence_weight * node[..., 0] * GAP_SCALE
        return logits.masked_fill(order != ORDER_MASKED, -math.inf).log_softmax(-1)


def save_spot(net: SpotNet, folder: Path, provenance: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(folder / WEIGHTS_FILE))
    meta = {"config": asdict(net.config), "parameters": sum(p.numel() for p in net.parameters())} | provenance
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")


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


class SpotProposer:
    def __init__(self, net: SpotNet):
        self.net = net
        self.fallback = ConfidenceProposer()

    @torch.no_grad()
    def propose(self, request: DraftRequest) -> DraftTree:
        if request.stale is None or request.budget == 0:
            return DraftTree()
        if request.rule.name != "top1" or request.rule.confidence not in SUPPORTED_CONFIDENCE:
            return self.fallback.propose(request)
        mask_id, stale, budget = request.rule.mask_id, request.stale, request.budget
        static = static_features(stale).cpu()[None]
        per_depth: dict[int, tuple[Tensor, Tensor]] = {}

        def at_depth(depth: int) -> tuple[Tensor, Tensor]:
            key = depth if request.noise else 0  # without noise every depth has the same candidates
            if key not in per_depth:
                noise = request.noise(request.step + depth) if request.noise else None
                per_depth[key] = candidates(stale, noise, request.temperature, request.rule)
            return per_depth[key]

        # Frontier: (-cumulative log-prob, tie-break, parent, depth, position). Position EXPAND stands
        # for a drafted node whose children are not scored yet: the network runs only when that entry
        # is popped (its children cannot score higher), so leaves of the final tree cost no call.
        frontier: list[tuple[float, int, int, int, int]] = [(0.0, 0, 0, 0, EXPAND)]
        orders = {0: torch.where(request.root.cpu() == mask_id, ORDER_MASKED, ORDER_BEFORE_ROOT)}
        nodes: list[DraftNode] = []
        counter = 0
        while frontier and len(nodes) < budget:
            neg_logp, _, parent, depth, position = heapq.heappop(frontier)
            if position == EXPAND:
                order = orders[parent]
                left = int((order == ORDER_MASKED).sum())
                if left <= 1:
                    continue  # the only child would complete the block: the verifier's bonus commit
                scores = self.net(static, at_depth(depth)[1][None], order[None], torch.tensor([depth]),
                                  torch.tensor([request.temperature]))[0]
                best = scores.topk(min(left, budget - len(nodes)))
                for value, child in zip(best.values.tolist(), best.indices.tolist()):
                    counter += 1
                    heapq.heappush(frontier, (neg_logp - value, counter, parent, depth, child))
                continue
            token = int(at_depth(depth)[0][position])
            nodes.append(DraftNode(parent, Transition((position,), (token,))))
            order = orders[parent].clone()
            order[position] = 2 + depth
            orders[len(nodes)] = order
            counter += 1
            heapq.heappush(frontier, (neg_logp, counter, len(nodes), depth + 1, EXPAND))
        return DraftTree(tuple(nodes))

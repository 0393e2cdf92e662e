"""SPOT: a learned proposer of the order in which the target commits positions (DESIGN.md section 1).

The target's stale view (its previous pass over the block) already holds the right token at most
positions; what is hard to guess is the *order*. `SpotNet`, a small transformer over the B block
positions (~0.6M parameters), reads only features of the stale view (per position: top-k
probabilities, entropy, margin, the coupled-noise candidate's log-probabilities and log-odds and its
runner-up's log-confidence at this depth, its confidence rank and gaps to the best masked position),
where it sits relative to the latest commits, the block's latest real commit (which the
one-commit-old stale view has not seen) and the path of commits already hypothesized on the current
tree branch, and outputs a distribution over the next committed position and, per position,
whether the target will commit the stale candidate there, the runner-up, or neither. Its inputs
never contain token ids, the vocabulary size or the absolute position, so one checkpoint runs on any
target and block length (transfer).

`SpotProposer` grows a general tree best-first by the probability that the verifier walks a path
(position times token, multiplied along it) up to the budget. The token at a drafted position is the
stale view's candidate under the same rule as the target's (`argmax(logit/T + G(seed, s + depth))`,
mask excluded), so with coupled noise a right order is accepted at any temperature; where the token
head expects the target's logits to have moved, the runner-up under the same noise is drafted as a
sibling, and at T > 0 so is the stale greedy token where it is a third token. The verifier decides
what is committed, so SPOT is lossless by construction whatever the network outputs.

Scope: SPOT orders single commits, i.e. the `top1` rule. Under a threshold rule a node commits a set;
there SPOT delegates to the confidence chain (the rule simulated on the stale logits), and SPOT-Sets
is left to its own proposer. Without a stale view (first pass of a block on block-causal targets) it
drafts nothing.
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

from harness.decoding import DraftRequest, DraftTree
from harness.decoding.rules import Rule, candidate_scores, greedy_tokens, without_mask
from harness.targets.zoo import ZOO_DIR
from proposers.confidence import ConfidenceProposer
from proposers.spot_kernels import encoder_layers, fused_path

TOP_K = 8
STATIC_FEATURES = TOP_K + 3
"""Per position, independent of depth: top-k probabilities, entropy, margin, log top-1 probability."""
CANDIDATE_FEATURES = 7
"""Per position and depth: the candidate's log-confidence by the rule's convention, its untempered and
tempered log-probabilities, the log-odds of its confidence, whether it equals the greedy token, and
its score margin over the runner-up (how far the target's logits must move to change the token), and
the runner-up's log-confidence (the position's confidence if the token flips)."""
TOP, RUNNER_UP, NEITHER = 0, 1, 2
"""What the target commits at a position, against the stale view's candidates there (token head)."""
GREEDY = 3
"""A tree child's third token choice: the stale view's greedy token (argmax of its logits, no noise),
drafted where it is neither candidate (so only at T > 0), with a share of the head's NEITHER."""
GREEDY_SHARE_OF_NEITHER = 0.40
"""How often the target commits the stale greedy token where it commits neither candidate and the
greedy token is neither: 0.40 on sdar-a's T=1 training prompts (GSM8K and arith 0-29, views 1-4
commits old, pooled; `python benchmarks/stale_tokens.py --split train --limit 30 --temperatures 1`).
Why it exists: at T > 0 a position whose stale distribution is still spread draws a low-probability
candidate; once a commit sharpens the distribution, the same noise picks its most probable token,
and the runner-up under the noise is not always that token."""
CONFIDENCE, LOG_ODDS = 0, 3
"""Columns of the candidate features that `node_features` compares across positions."""
LOG_FLOOR = -30.0
WEIGHTS_FILE = "spot.safetensors"
CONFIG_FILE = "spot.json"
DEFAULT_CHECKPOINT = "spot-sdar-a-grid"
"""The registry's `spot`: the zoo checkpoint trained on sdar-a, last on its absolute block grid
(zoo/proposers/, docs/spot.md)."""
SUPPORTED_CONFIDENCE = ("prob", "tempered_prob")
"""Conventions whose log-confidence is a candidate log-probability (every zoo and published family)."""
DEFAULT_LOOKAHEAD = 3
"""`SpotProposer.lookahead`: the most rows of one network call. On one CPU thread a row of the
network costs about as much as a call's fixed work, so a guessed row pays only if it is right half
the time: 2 to 4 were the fastest on sdar-a (budgets 8 and 16, within noise of each other), 8 was
slower (benchmarks/proposer_cost.py --lookaheads 1,2,3,4,8). On a GPU, where a call costs about the
same for any number of rows, a larger value saves calls (not measured)."""


def log_odds(logp: Tensor, tokens: Tensor) -> Tensor:
    """log p(token) - log(1 - p(token)) per position, exact near p = 1.

    Why: the target's near-ties are between positions it is almost sure of (0.994 against 0.995),
    where log-probabilities differ by 1e-3 and log-odds by 0.2; without this scale the network
    cannot tell a near-tie from a clear lead.
    """
    chosen = logp.gather(-1, tokens[:, None]).squeeze(1)
    rest = logp.scatter(-1, tokens[:, None], -math.inf).logsumexp(-1)
    return chosen - rest


@dataclass(frozen=True)
class StaleView:
    """The depth-independent parts of a stale view (float64), computed once per draft."""

    logits: Tensor
    temperature: float
    plain_logp: Tensor
    tempered_logp: Tensor
    greedy: Tensor

    @staticmethod
    def of(stale: Tensor, temperature: float, mask_id: int) -> StaleView:
        x = stale.double()
        plain_logp = x.log_softmax(-1)
        tempered_logp = (x / temperature).log_softmax(-1) if temperature > 0 else plain_logp
        return StaleView(x, temperature, plain_logp, tempered_logp, greedy_tokens(x, mask_id))


def static_features(view: StaleView) -> Tensor:
    """[B, STATIC_FEATURES] float32 summary of a stale view, computed in float64."""
    logp = view.plain_logp
    probs = logp.exp()
    top = probs.topk(TOP_K, dim=-1).values
    entropy = -(probs * logp).sum(-1, keepdim=True)
    margin = top[:, :1] - top[:, 1:2]
    return torch.cat([top, entropy, margin, top[:, :1].log().clamp_min(LOG_FLOOR)], -1).float()


@dataclass(frozen=True)
class Candidates:
    """The stale view's tokens at every position for one depth's noise, and their features."""

    tokens: Tensor
    """[B] the rule's candidate: what the target commits wherever the stale view is still right."""
    runner_up: Tensor
    """[B] the second best under the same scores: the token the target commits where a small change
    of its logits flips the candidate."""
    greedy: Tensor
    """[B] the stale view's most probable token (`GREEDY`), the same at every depth."""
    features: Tensor
    """[B, CANDIDATE_FEATURES] float32."""

    def token(self, choice: int, position: int) -> int:
        """The token a tree child with this choice (TOP, RUNNER_UP or GREEDY) drafts at `position`."""
        return int({TOP: self.tokens, RUNNER_UP: self.runner_up, GREEDY: self.greedy}[choice][position])

    def greedy_is_third(self, position: int) -> bool:
        """Whether the greedy token at `position` is neither the candidate nor the runner-up."""
        return int(self.greedy[position]) not in (int(self.tokens[position]), int(self.runner_up[position]))

    def token_choices(self, token_logp: Tensor, position: int) -> list[tuple[int, float]]:
        """The tree's children at `position` with log P(the target commits that token | it commits
        the position): TOP and RUNNER_UP from the token head, and GREEDY where it is a third token."""
        choices = [(TOP, float(token_logp[position, TOP])), (RUNNER_UP, float(token_logp[position, RUNNER_UP]))]
        if self.greedy_is_third(position):
            choices.append((GREEDY, float(token_logp[position, NEITHER]) + math.log(GREEDY_SHARE_OF_NEITHER)))
        return choices


def candidates(view: StaleView, noise: Tensor | None, rule: Rule) -> Candidates:
    """The rule's candidate and runner-up at every position at one depth, and the candidate's features.

    Same candidate as `harness.decoding.rules` (float64, mask excluded, ties to the lowest id), so a
    drafted token is the one the target commits whenever the stale view is still right there.
    """
    if rule.confidence not in SUPPORTED_CONFIDENCE:
        raise ValueError(f"SPOT features need a probability confidence, not {rule.confidence!r}")
    scores = candidate_scores(view.logits, noise, view.temperature)
    ranked = without_mask(scores, rule.mask_id)  # `greedy_tokens` twice, on one copy of the scores
    tokens = ranked.max(-1).indices
    runner_up = ranked.scatter_(-1, tokens[:, None], -math.inf).max(-1).indices
    margin = (scores.gather(-1, tokens[:, None]) - scores.gather(-1, runner_up[:, None])).squeeze(1)
    plain = view.plain_logp.gather(-1, tokens[:, None]).squeeze(1)
    tempered = view.tempered_logp.gather(-1, tokens[:, None]).squeeze(1)
    confidence_logp = view.plain_logp if rule.confidence == "prob" else view.tempered_logp
    confidence = confidence_logp.gather(-1, tokens[:, None]).squeeze(1)
    odds = log_odds(confidence_logp, tokens)
    runner_up_confidence = confidence_logp.gather(-1, runner_up[:, None]).squeeze(1)
    features = torch.stack([
        confidence.clamp_min(LOG_FLOOR), plain.clamp_min(LOG_FLOOR), tempered.clamp_min(LOG_FLOOR),
        odds.clamp(LOG_FLOOR, -LOG_FLOOR), (tokens == view.greedy).double(), margin.clamp_max(-LOG_FLOOR),
        runner_up_confidence.clamp_min(LOG_FLOOR),
    ], -1)
    return Candidates(tokens.cpu(), runner_up.cpu(), view.greedy.cpu(), features.float().cpu())


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


MASKED = -1
"""`ages[i]`: how many commits of the block were made after position i was committed (0: the
latest), MASKED where i is still masked. Ages are exact for the hypothesized commits of the branch
and for the root's latest real commit (`DraftRequest.history[-1]`), the one the stale view has not
seen yet: committing a position changes its neighbours' confidences, and the stale view does not
show that change. Older real commits are already in the stale view and only tell the target's
habit; they all get the age `max_age` (keeping their order helped sdar-a by up to 3% and cost up
to 5% on the other zoo targets, docs/spot.md)."""
NODE_FEATURES = 12
GAP_SCALE = 10.0
"""Gaps (log-confidence, log-odds) are clamped to -GAP_SCALE and divided by it."""
OFFSET_SCALE = 8


def root_ages(root: Tensor, mask_id: int, history: tuple[int, ...], max_age: int) -> Tensor:
    """[B] ages at the root: 0 for the latest commit, `max_age` for every other committed position."""
    ages = torch.where(root.cpu() == mask_id, MASKED, max_age)
    if history:
        ages[history[-1]] = 0
    return ages


def commit(ages: Tensor, position: int) -> Tensor:
    """The ages one commit (of `position`) later."""
    out = torch.where(ages == MASKED, MASKED, ages + 1)
    out[position] = 0
    return out


def gap_to_best(score: Tensor, masked: Tensor) -> Tensor:
    """Each masked position's score minus the best masked one's, clamped at -GAP_SCALE (0 where
    committed): the rule's ranking, which both networks' position residuals read. Positions are the
    last dimension; `masked` broadcasts against `score` (several scores per position at once)."""
    score = score.masked_fill(~masked, -math.inf)
    gap = (score - score.max(-1, keepdim=True).values).nan_to_num(0.0).clamp_min(-GAP_SCALE)
    return gap.masked_fill(~masked, 0.0)


def _offset_to(positions: Tensor, marked: Tensor) -> Tensor:
    """Signed offset of every position from the one marked per row, 0 where no row is marked."""
    where = marked.float().argmax(-1, keepdim=True)
    offset = (positions - where).clamp(-OFFSET_SCALE, OFFSET_SCALE) / OFFSET_SCALE
    return offset * marked.any(-1, keepdim=True)


def node_features(candidate: Tensor, ages: Tensor, depth: Tensor) -> Tensor:
    """[N, B, NODE_FEATURES]: each position relative to the rest of the block at one tree node.

    Why relative: absolute positions and confidence levels are calibrated to the target the network
    was trained on (a position embedding learned sdar-a's own order and lost to plain confidence on
    every other zoo target, docs/spot.md); how a position ranks against the other masked ones and
    where it sits next to the latest commits carries over. Features: gaps to the best masked position
    in log-confidence (the rule's convention) and in log-odds, is-best, confidence rank, fraction of
    the block still masked, left / right neighbour committed (the block's left edge counts as
    committed), leftmost masked, adjacent to the latest commit, signed offsets from the latest and
    the second latest commit, and committed after the stale view was computed (age <= depth).

    Written into one tensor with few operations: on a CPU thread the per-operation overhead is
    most of its time (it runs once per network call of the tree search).
    """
    committed = ages != MASKED
    masked = ~committed
    out = candidate.new_empty(*ages.shape, NODE_FEATURES)
    gaps = gap_to_best(candidate[..., [CONFIDENCE, LOG_ODDS]].transpose(-1, -2), masked[..., None, :])
    torch.div(gaps.transpose(-1, -2), GAP_SCALE, out=out[..., :2])
    score = candidate[..., CONFIDENCE].masked_fill(committed, -math.inf)
    rank = (score[..., None, :] > score[..., :, None]).sum(-1).clamp_max_(7).masked_fill_(committed, 7)
    out[..., 2] = rank == 0
    torch.div(rank, 7, out=out[..., 3])
    out[..., 4] = masked.float().mean(-1, keepdim=True)
    out[..., 0, 5] = 1.0
    out[..., 1:, 5] = committed[..., :-1]
    out[..., -1, 6] = 0.0
    out[..., :-1, 6] = committed[..., 1:]
    out[..., 7] = masked & (masked.cumsum(-1) == 1)
    marked = torch.stack([ages == 0, ages == 1], -2)  # [N, 2, B]: the latest and the second latest commit
    offsets = _offset_to(torch.arange(ages.shape[-1], device=ages.device), marked)
    out[..., 8] = offsets[..., 0, :].abs() * OFFSET_SCALE == 1
    out[..., 9:11] = offsets.transpose(-1, -2)
    out[..., 11] = committed & (ages <= depth[:, None])
    return out


class SpotNet(nn.Module):
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

    def forward(self, static: Tensor, candidate: Tensor, ages: Tensor, depth: Tensor, temperature: Tensor,
                masked_only: bool = False) -> tuple[Tensor, Tensor]:
        """static [N, B, S], candidate [N, B, C], ages [N, B], depth [N], temperature [N]
        -> [N, B] log-probabilities of the next committed position (-inf where not masked), and
        [N, B, 3] log-probabilities of TOP / RUNNER_UP / NEITHER at each position; with
        `masked_only`, the token head's output at committed positions is unspecified (the tree
        search reads only masked ones, and skips work for the others: proposers/spot_kernels.py)."""
        h, position = self.encode(static, candidate, ages, depth, temperature, masked_only=masked_only)
        return position, self.token_head(h).log_softmax(-1)

    def encode(self, static: Tensor, candidate: Tensor, ages: Tensor, depth: Tensor, temperature: Tensor,
               extra: Tensor | None = None, masked_only: bool = False) -> tuple[Tensor, Tensor]:
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
    """SPOT's draft trees (module docstring); the best-first search is in proposers/spot_tree.py.

    `lookahead`: the most rows of one network call, the missing node's and those the search expects
    to expand next (`spot_tree.plan`); 1 calls the network once per expanded node, with batch 1.
    The tree does not depend on it (up to float near-ties, see spot_tree). Devices: the work over
    the vocabulary (stale view, candidates) runs on the stale logits' device, the network on its
    parameters' device (move it with `net.to(device)` to keep a GPU pass on the GPU); only features
    and outputs cross.
    """

    def __init__(self, net: SpotNet | SpotEnsemble, lookahead: int = DEFAULT_LOOKAHEAD):
        if lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {lookahead}")
        self.net = net
        self.lookahead = lookahead
        self.fallback = ConfidenceProposer()

    @torch.no_grad()
    def propose(self, request: DraftRequest) -> DraftTree:
        if request.stale is None or request.budget == 0:
            return DraftTree()
        if request.rule.name != "top1" or request.rule.confidence not in SUPPORTED_CONFIDENCE:
            return self.fallback.propose(request)
        from proposers.spot_tree import grow  # here: spot_tree builds on this module's features

        return grow(self.net, request, self.lookahead)[0]

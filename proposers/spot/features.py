"""SPOT's inputs: what the network reads of the target's stale view and of a tree node.

Per position and independent of depth, a summary of the stale view (`static_features`); per depth,
the rule's candidate under that depth's coupled noise, its runner-up and their features
(`candidates`); per tree node, each position relative to the rest of the block (`node_features`)
from the commit ages of the branch (`root_ages`, `commit`). Nothing here is absolute (no token ids,
no vocabulary size, no absolute position), so one checkpoint runs on any target and block length.
The network (proposers/spot/network.py), its tree search (proposers/spot/tree.py), the training
data (proposers/spot/collection.py) and SPOT-Sets all build on this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from harness.decoding.rules import Rule, candidate_scores, greedy_tokens, without_mask

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
SUPPORTED_CONFIDENCE = ("prob", "tempered_prob")
"""Conventions whose log-confidence is a candidate log-probability (every zoo and published family)."""


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
    features = torch.stack(
        [
            confidence.clamp_min(LOG_FLOOR),
            plain.clamp_min(LOG_FLOOR),
            tempered.clamp_min(LOG_FLOOR),
            odds.clamp(LOG_FLOOR, -LOG_FLOOR),
            (tokens == view.greedy).double(),
            margin.clamp_max(-LOG_FLOOR),
            runner_up_confidence.clamp_min(LOG_FLOOR),
        ],
        -1,
    )
    return Candidates(tokens.cpu(), runner_up.cpu(), view.greedy.cpu(), features.float().cpu())


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

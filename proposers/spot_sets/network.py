"""SPOT-Sets: SPOT for threshold decoding, where a step commits a *set* of positions (DESIGN.md section 1).

Under `threshold:TAU` the target commits, at each step, the most confident masked position (the
argmax, which the rule forces) plus every other masked position whose confidence is >= tau. A draft
path is therefore a sequence of sets. `SpotSetsNet` reads SPOT's features of the stale view
(proposers/spot/network.py: nothing absolute, no token ids, so it runs on any target and block length) plus
how far each candidate's confidence is from tau, and predicts at every tree node:

- the argmax: a distribution over the masked positions (SPOT's position head: at tau 0.9 on sdar-a
  93% of steps commit one position, so which one comes first is still most of the problem);
- per position, whether it is committed besides the argmax (a commit logit, sigmoid): the residual is
  the stale view's own threshold decision, log-odds of the confidence minus logit(tau), so an untrained
  network reproduces the confidence-set baseline (the rule simulated on the stale logits);
- per position, which stale candidate the target commits there (SPOT's token head).

A set S with argmax j has probability q_j * prod_{i in S, i != j} a_i * prod_{i not in S} (1 - a_i)
times its tokens' probabilities; `proposers/spot_sets/tree.py` grows the tree best-first over such
sets. The verifier applies the exact rule to every row and walks by state equality, so SPOT-Sets is
lossless by construction whatever the network outputs.

`Calibration` (from `spotbench calibrate-spot-sets`) blends a checkpoint's commit logits and argmax distribution
with the stale view's own rule for one other target at one tau; the proposer
(proposers/spot_sets/tree.py) applies it when its folder holds one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from proposers.spot.features import (
    CONFIDENCE,
    GAP_SCALE,
    LOG_FLOOR,
    LOG_ODDS,
    MASKED,
    TOP,
    gap_to_best,
)
from proposers.spot.network import SpotConfig, SpotEncoder, save_net

WEIGHTS_FILE = "spot_sets.safetensors"
CONFIG_FILE = "spot_sets.json"
CALIBRATION_FILE = "calibration.json"
DEFAULT_CHECKPOINT = "spot-sets-sdar-a-0.9"
"""The registry's bare `spot-sets`: the zoo checkpoint trained on sdar-a at tau 0.9 (docs/spot_sets.md)."""
TAU_FEATURES = 3
"""Per position and depth: log-odds of the candidate's confidence minus logit(tau) (> 0: the stale
view commits it), log-confidence minus log(tau), and logit(tau) itself."""
MAX_TAU = 1.0 - 1e-12
"""tau = 1 is a valid rule (commit the argmax, and positions at confidence exactly 1); its logit is
taken at this value so the features stay finite."""


def threshold_tau(rule: str) -> float | None:
    """tau of a `threshold:TAU` rule text, None for any other rule (top1) or a malformed one."""
    name, _, argument = rule.partition(":")
    try:
        tau = float(argument)
    except ValueError:
        return None
    return tau if name == "threshold" and 0 < tau <= 1 else None


def tau_features(candidate: Tensor, tau: Tensor) -> Tensor:
    """[N, B, TAU_FEATURES] from candidate features [N, B, C] and tau [N]: where each stale candidate
    sits against the threshold. Why log-odds: near 1 confidences 0.9 and 0.99 differ by 0.09 in log
    but by 2.4 in log-odds, and tau 0.9 sits exactly there."""
    tau = tau.double().clamp(1e-6, MAX_TAU)
    logit_tau = (tau.log() - (-tau).log1p()).float()[:, None]
    odds_gap = (candidate[..., LOG_ODDS] - logit_tau).clamp(LOG_FLOOR, -LOG_FLOOR)
    confidence_gap = (candidate[..., CONFIDENCE] - tau.log().float()[:, None]).clamp(LOG_FLOOR, 1.0)
    return torch.stack([odds_gap, confidence_gap, (logit_tau / GAP_SCALE).expand_as(odds_gap)], -1)


class SpotSetsNet(SpotEncoder):
    """SPOT's network (same modules, names and inputs, so a SPOT checkpoint can start it) with the
    tau features added to its input and a commit head beside its position and token heads.

    Outputs per node: log q (argmax position), the commit logit of every position (committed besides
    the argmax), and log P(TOP / RUNNER_UP / NEITHER | committed). New parts start at zero, and the
    commit residual `commit_weight * (log-odds - logit tau)` starts at weight 1: an untrained network
    (or a SPOT checkpoint just loaded) proposes the stale view's own threshold set first.
    """

    def __init__(self, config: SpotConfig):
        super().__init__(config)
        self.tau_project = nn.Linear(TAU_FEATURES, config.width)
        self.commit_head = nn.Linear(config.width, 1)
        self.commit_weight = nn.Parameter(torch.tensor(1.0))
        for module in (self.tau_project, self.commit_head):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self, static: Tensor, candidate: Tensor, ages: Tensor, depth: Tensor, temperature: Tensor, tau: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """static [N, B, S], candidate [N, B, C], ages [N, B], depth [N], temperature [N], tau [N] ->
        [N, B] log q (-inf where not masked), [N, B] commit logits, [N, B, 3] token log-probabilities."""
        gaps = tau_features(candidate, tau)
        h, position = self.encode(static, candidate, ages, depth, temperature, self.tau_project(gaps))
        commit = self.commit_head(h).squeeze(-1) + self.commit_weight * gaps[..., 0]
        return position, commit, self.token_head(h).log_softmax(-1)


def rule_inputs(candidate: Tensor, ages: Tensor, tau: Tensor) -> tuple[Tensor, Tensor]:
    """[N, B] twice: the stale view's own rule, as the network's residuals read it: each masked
    position's log-confidence minus the best masked one's (clamped at -GAP_SCALE; the argmax ranking)
    and its log-odds minus logit(tau) (> 0: the stale view commits it)."""
    return gap_to_best(candidate[..., CONFIDENCE], ages == MASKED), tau_features(candidate, tau)[..., 0]


@dataclass(frozen=True)
class Calibration:
    """Per-target, per-tau adjustment of a checkpoint's outputs, each a blend of the network's output
    and the stale view's own rule:

    - argmax: log_softmax(log q / position_temperature + position_rule_weight * confidence gap);
    - commit: commit_scale * logit + commit_bias + commit_rule_weight * (log-odds - logit tau);
    - token: log_softmax(log P / token_temperature + top_bias * [TOP]), the rule drafting TOP.

    Why: a checkpoint ranks positions on any target (its features are relative), but how much its
    ranking beats the target's own confidence order, and how often a confidence just under tau crosses
    it after one commit, are properties of the target; five numbers fitted on 50 prompts set the
    probabilities the tree multiplies, from "trust the network" to "trust the confidences", without
    retraining. All zero weights and unit scales leave the network's output as it is. Each number is
    a float, or a 0-d tensor while `fit_calibration` fits it by gradient.
    """

    commit_scale: float | Tensor = 1.0
    commit_bias: float | Tensor = 0.0
    commit_rule_weight: float | Tensor = 0.0
    position_temperature: float | Tensor = 1.0
    position_rule_weight: float | Tensor = 0.0
    token_temperature: float | Tensor = 1.0
    top_bias: float | Tensor = 0.0

    def apply(
        self, position: Tensor, commit: Tensor, token: Tensor, gap: Tensor, odds_gap: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Calibrated (log q, commit logits, token log-probabilities) from the network's and `rule_inputs`."""
        position = (position / self.position_temperature + self.position_rule_weight * gap).log_softmax(-1)
        commit = commit * self.commit_scale + self.commit_bias + self.commit_rule_weight * odds_gap
        top = torch.zeros(token.shape[-1], dtype=token.dtype, device=token.device)
        top[TOP] = 1.0
        return position, commit, (token / self.token_temperature + self.top_bias * top).log_softmax(-1)


def predict(
    net: nn.Module,
    calibration: Calibration | None,
    static: Tensor,
    candidate: Tensor,
    ages: Tensor,
    depth: Tensor,
    temperature: Tensor,
    tau: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """The network's outputs (`SpotSetsNet.forward`), calibrated when a calibration is given: what the
    tree multiplies and what evaluation scores."""
    position, commit, token = net(static, candidate, ages, depth, temperature, tau)
    if calibration is not None:
        return calibration.apply(position, commit, token, *rule_inputs(candidate, ages, tau))
    return position, commit, token


def save_spot_sets(net: SpotSetsNet, folder: Path, meta: dict) -> None:
    save_net(net, folder, WEIGHTS_FILE, CONFIG_FILE, meta)


def read_meta(folder: str | Path) -> dict:
    """A SPOT-Sets checkpoint's record (config, recipe, provenance with `rule` and `tau`)."""
    return json.loads((Path(folder) / CONFIG_FILE).read_text())


def load_spot_sets(folder: str | Path) -> SpotSetsNet:
    net = SpotSetsNet(SpotConfig(**read_meta(folder)["config"]))
    net.load_state_dict(load_file(str(Path(folder) / WEIGHTS_FILE)))
    return net.eval()


def read_calibration(folder: str | Path) -> dict | None:
    """The folder's calibration record (`spotbench calibrate-spot-sets`): fitted values and provenance, or None."""
    path = Path(folder) / CALIBRATION_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def load_calibration(folder: str | Path) -> Calibration | None:
    record = read_calibration(folder)
    return None if record is None else Calibration(**record["calibration"])

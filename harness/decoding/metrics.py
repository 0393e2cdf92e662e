"""Per-generation metrics (DESIGN.md section 3; vLLM's names where they exist)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Metrics:
    nfe: int = 0
    """Target forward passes (the session counts them, so every arm is accounted the same way)."""
    rows: int = 0
    """States evaluated over all passes: the compute cost."""
    commits: int = 0
    """Transitions committed (steps). Under top1 one per token; under threshold a set each."""
    draft_nodes: int = 0
    """Draft nodes evaluated (after validation), cf. vLLM's num_draft_tokens."""
    accepted_per_depth: list[int] = field(default_factory=list)
    """[d]: passes whose walk accepted a draft node at depth d + 1 (bonus commits not included)."""
    wall_s: float = 0.0
    target_s: float = 0.0
    """Time inside session.forward."""
    proposer_s: float = 0.0
    """Time inside proposer.propose."""
    stale_commits: int = 0
    """Plain decoding: committed tokens that had a stale view (a previous pass over their block)."""
    stale_hits: int = 0
    """... of which the token equals the stale view's greedy token at that position (see plain.py)."""
    draft_target_forwards: int = 0
    """AR: forwards of the target's own network the proposer ran to draft (Psi-Spec's draft forward,
    gate on): they cost what a verify forward costs, so they count in `target_forwards`."""
    draft_model_forwards: int = 0
    """AR: forwards of a separate draft model (`draft-model:NAME`): a cost, but not the target's."""

    @property
    def mean_accept_len(self) -> float:
        """Transitions per target pass, including the bonus: 1.0 for plain decoding."""
        return self.commits / self.nfe if self.nfe else 0.0

    @property
    def target_forwards(self) -> int:
        """Forwards of the target's network: verify passes (`nfe`) and the proposer's draft forwards on it."""
        return self.nfe + self.draft_target_forwards

    @property
    def tokens_per_target_forward(self) -> float:
        """Commits per target-network forward, draft and verify forwards counted (tau's cost-aware twin)."""
        return self.commits / self.target_forwards if self.target_forwards else 0.0

    @property
    def stale_hit_rate(self) -> float | None:
        return self.stale_hits / self.stale_commits if self.stale_commits else None

    @property
    def other_s(self) -> float:
        return self.wall_s - self.target_s - self.proposer_s

    def as_dict(self) -> dict:
        return asdict(self) | {
            "mean_accept_len": self.mean_accept_len,
            "target_forwards": self.target_forwards,
            "tokens_per_target_forward": self.tokens_per_target_forward,
            "other_s": self.other_s,
            "stale_hit_rate": self.stale_hit_rate,
        }

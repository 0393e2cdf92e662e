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

    @property
    def mean_accept_len(self) -> float:
        """Transitions per target pass, including the bonus: 1.0 for plain decoding."""
        return self.commits / self.nfe if self.nfe else 0.0

    @property
    def stale_hit_rate(self) -> float | None:
        return self.stale_hits / self.stale_commits if self.stale_commits else None

    @property
    def other_s(self) -> float:
        return self.wall_s - self.target_s - self.proposer_s

    def as_dict(self) -> dict:
        return asdict(self) | {
            "mean_accept_len": self.mean_accept_len,
            "other_s": self.other_s,
            "stale_hit_rate": self.stale_hit_rate,
        }

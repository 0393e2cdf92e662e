"""Commit rules: candidates, confidence conventions, tie-breaking, threshold strictness."""

import math

import pytest
import torch

from harness.decoding import Rule, Transition, parse_rule
from harness.decoding.rules import Confidence
from harness.errors import UserError
from harness.targets.families import FAMILIES

MASK = 9
V = 10


def block(rows: list[list[float]]) -> torch.Tensor:
    """Logits [B, V]: each row's listed values on the first tokens, -30 elsewhere."""
    out = torch.full((len(rows), V), -30.0, dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return out


def probs(*values: float) -> list[float]:
    """Logits whose softmax over the listed tokens is `values` (the rest is negligible)."""
    return [math.log(v) for v in values]


def masks(n: int) -> torch.Tensor:
    return torch.full((n,), MASK)


def top1(confidence: Confidence = "prob") -> Rule:
    return Rule("top1", MASK, confidence)


def test_transition_is_hashable_sorted_and_applies():
    t = Transition((1, 3), (5, 6))
    assert t == Transition((1, 3), (5, 6)) and hash(t) == hash(Transition((1, 3), (5, 6)))
    assert t.apply(masks(4)).tolist() == [MASK, 5, MASK, 6]
    for bad in (((3, 1), (5, 6)), ((1, 1), (5, 6)), ((1,), (5, 6))):
        with pytest.raises(ValueError):
            Transition(*bad)


def test_top1_picks_most_confident_masked_position():
    logits = block([probs(0.5, 0.5), probs(0.9, 0.1), probs(0.2, 0.8)])
    assert top1()(logits, masks(3), None, 0.0) == Transition((1,), (0,))
    state = masks(3)
    state[1] = 4  # position 1 is committed: the rule ignores it
    assert top1()(logits, state, None, 0.0) == Transition((2,), (1,))


def test_ties_lowest_token_and_lowest_position():
    logits = block([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    assert top1()(logits, masks(2), None, 0.0) == Transition((0,), (1,))


def test_mask_token_is_never_a_candidate():
    logits = block([[0.0, 1.0]])
    logits[0, MASK] = 50.0
    assert top1()(logits, masks(1), None, 0.0) == Transition((0,), (1,))


def test_temperature_adds_gumbel_noise():
    logits = block([[2.0, 1.0, 0.0]])
    noise = torch.zeros(1, V, dtype=torch.float64)
    assert top1()(logits, masks(1), noise, 1.0).tokens == (0,)
    noise[0, 2] = 2.5  # 0/T + 2.5 > 2/T
    assert top1()(logits, masks(1), noise, 1.0).tokens == (2,)
    assert top1()(logits, masks(1), noise, 0.5).tokens == (0,)  # 4 > 2.5
    assert top1()(logits, masks(1), noise, 0.0).tokens == (0,)  # T=0 ignores noise
    with pytest.raises(ValueError):
        top1()(logits, masks(1), None, 1.0)


def test_confidence_conventions_rank_differently():
    # position 0: p = (0.5, 0.45): high prob, low margin; position 1: p = (0.4, 0.1, 0.1, ...)
    rows = [probs(0.5, 0.45, 0.05), probs(0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1)]
    logits = block(rows)
    assert top1("prob")(logits, masks(2), None, 0.0).positions == (0,)
    assert top1("tempered_prob")(logits, masks(2), None, 0.0).positions == (0,)
    assert top1("margin")(logits, masks(2), None, 0.0).positions == (1,)
    # entropy: row 0 ~0.86 nats, row 1 ~1.79 nats -> row 0 is more confident
    assert top1("neg_entropy")(logits, masks(2), None, 0.0).positions == (0,)


def test_prob_is_untempered_and_tempered_prob_is_not():
    # untempered: row 0 p=0.73, row 1 p=0.45; at T=0.25: row 0 p=0.982, row 1 p=0.997
    logits = block([[1.0, 0.0], [10.0] + [8.0] * 9])
    noise = torch.zeros(2, V, dtype=torch.float64)
    assert top1("prob")(logits, masks(2), noise, 0.25).positions == (0,)
    assert top1("tempered_prob")(logits, masks(2), noise, 0.25).positions == (1,)
    assert top1("tempered_prob")(logits, masks(2), noise, 0.0).positions == (0,)


def test_threshold_commits_top1_plus_confident_positions():
    logits = block([probs(0.3, 0.7), probs(0.95, 0.05), probs(0.6, 0.4), probs(0.5, 0.5)])
    rule = Rule("threshold", MASK, "prob", tau=0.65)
    assert rule(logits, masks(4), None, 0.0) == Transition((0, 1), (1, 0))
    high = Rule("threshold", MASK, "prob", tau=0.99)  # nobody passes: still the top-1
    assert high(logits, masks(4), None, 0.0) == Transition((1,), (0,))


def test_threshold_strict_vs_non_strict_at_equality():
    logits = block([[0.0, 0.0], [5.0, 0.0]])
    at_tau = logits[0].log_softmax(-1).exp()[0].item()  # the confidence of position 0, exactly
    loose = Rule("threshold", MASK, "prob", tau=at_tau, strict=False)
    strict = Rule("threshold", MASK, "prob", tau=at_tau, strict=True)
    assert loose(logits, masks(2), None, 0.0).positions == (0, 1)
    assert strict(logits, masks(2), None, 0.0).positions == (1,)


def test_explain_agrees_with_call_and_measures_the_margin():
    logits = block([probs(0.6, 0.4), probs(0.9, 0.1)])
    rule = top1()
    transition, record = rule.explain(logits, masks(2), None, 0.0)
    assert transition == rule(logits, masks(2), None, 0.0)
    assert record.confidence_margin == pytest.approx(0.3)
    assert record.decision_gap == pytest.approx(min(math.log(0.9 / 0.6), math.log(0.6 / 0.4)))
    single = rule.explain(logits, Transition((1,), (0,)).apply(masks(2)), None, 0.0)[1]
    assert single.confidence_margin == math.inf


def test_parse_rule_uses_family_conventions():
    rule = parse_rule("threshold:0.9", FAMILIES["llada2"], 5)
    assert (rule.name, rule.tau, rule.strict, rule.mask_id) == ("threshold", 0.9, True, 5)
    assert not parse_rule("threshold:0.9", FAMILIES["llada"], 5).strict
    assert parse_rule("top1", FAMILIES["dream"], 5).confidence == "tempered_prob"
    assert str(rule) == "threshold:0.9"
    for bad in ("top2", "threshold", "threshold:x", "threshold:nan", "top1:0.5"):
        with pytest.raises(UserError):
            parse_rule(bad, FAMILIES["llada"], 5)


def _decided_gap(logits: torch.Tensor, state: torch.Tensor, mask_id: int, include_mask: bool) -> float:
    """top1 at T=0 with `prob` confidence, from first principles: the smallest of the token gaps
    (best minus second-best logit at each masked position) and the log-probability gap between the
    two most confident positions. `include_mask` is the old, wrong token gap over the whole vocabulary."""
    masked = (state == mask_id).nonzero().squeeze(1)
    x = logits[masked].double()
    scores = x if include_mask else x.index_fill(-1, torch.tensor([mask_id]), -math.inf)
    top2 = scores.topk(2, dim=-1).values
    gaps = [float((top2[:, 0] - top2[:, 1]).min())]
    candidates = x.index_fill(-1, torch.tensor([mask_id]), -math.inf).argmax(-1)
    logp = x.log_softmax(-1).gather(-1, candidates[:, None]).squeeze(1)
    if logp.numel() > 1:
        best2 = logp.topk(2).values
        gaps.append(float(best2[0] - best2[1]))
    return min(gaps)


def test_the_recorded_decision_gap_is_the_rules_own_and_excludes_the_mask_token():
    from harness.decoding import DecodeConfig, plain_decode
    from harness.targets.registry import load_target

    target = load_target("tiny-random:sdar:0")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 32, 16, 0.0, 0)
    plain = plain_decode(target, list(b"Q: 3+4=?\nA:"), config, keep_logits=True)
    state, differs = plain.first_state, 0
    for step, (transition, record) in enumerate(zip(plain.steps, plain.records)):
        logits = plain.pass_logits[step]
        assert record.decision_gap == pytest.approx(_decided_gap(logits, state, target.mask_id, False), abs=1e-9)
        differs += _decided_gap(logits, state, target.mask_id, True) != pytest.approx(record.decision_gap, abs=1e-9)
        state = transition.apply(state)
        if not bool((state == target.mask_id).any()):
            state = torch.full((16,), target.mask_id)
    assert differs > 0  # negative control: the whole-vocabulary gap is another number at some steps


@pytest.mark.parametrize("confidence", ["prob", "tempered_prob", "margin", "neg_entropy"])
@pytest.mark.parametrize("rule", ["top1", "threshold:0.3", "strict:0.3"])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_decide_many_is_the_rule_on_every_row(confidence, rule, temperature):
    # Random blocks with exact ties (repeated logits, whole repeated rows) and states with 1 to 7
    # masked positions: every generation's transition equals the rule applied to it alone.
    generator = torch.Generator().manual_seed(7)
    tau = None if rule == "top1" else 0.3
    r = Rule("top1" if tau is None else "threshold", MASK, confidence, tau, rule.startswith("strict"))
    logits = (torch.randn(12, 8, V, generator=generator) * 3).round()  # few distinct values: ties
    logits[3] = logits[2]
    states = torch.randint(0, MASK, (12, 8), generator=generator)
    for g in range(12):
        states[g, torch.randperm(8, generator=generator)[: 1 + g % 7]] = MASK
    noise = torch.rand(12, 8, V, generator=generator, dtype=torch.float64) if temperature else None
    many = r.decide_many(list(logits), list(states), None if noise is None else list(noise), temperature)
    assert many == [r(logits[g], states[g], None if noise is None else noise[g], temperature) for g in range(12)]
    assert len({t.positions for t in many}) > 3  # the rows decide differently
    with pytest.raises(ValueError, match="masked"):
        r.decide_many([logits[0]], [torch.zeros(8, dtype=torch.long)], None, 0.0)


@pytest.mark.parametrize("confidence", ["prob", "tempered_prob", "margin", "neg_entropy"])
@pytest.mark.parametrize("rule", ["top1", "threshold:0.3", "strict:0.3"])
def test_scores_at_t0_decide_every_later_state_as_the_rule_does(confidence, rule):
    # A chain on fixed logits at T=0, each later state the one before with the rule's transition (or
    # a random masked position) filled: the scores of the first state decide each exactly as the rule
    # on that state. Logits with ties, so the tie-breaks are compared too.
    generator = torch.Generator().manual_seed(11)
    tau = None if rule == "top1" else 0.3
    r = Rule("top1" if tau is None else "threshold", MASK, confidence, tau, rule.startswith("strict"))
    for trial in range(20):
        logits = (torch.randn(8, V, generator=generator) * 2).round()
        state = torch.full((8,), MASK)
        state[torch.randperm(8, generator=generator)[: trial % 3]] = 1
        [scored] = r.score_many([logits], [state], None, 0.0)
        while bool((state == MASK).any()):
            assert scored.decide(r, state) == r(logits, state, None, 0.0)
            if trial % 2:  # a state no chain of this rule reaches
                state = state.clone()
                state[(state == MASK).nonzero()[0]] = 2
            else:
                state = r(logits, state, None, 0.0).apply(state)
    # negative control: at T>0 the first state's scores are not the next step's (its noise differs)
    logits = torch.zeros(8, V, dtype=torch.float64)
    noises = [torch.rand(8, V, generator=generator, dtype=torch.float64) for _ in range(2)]
    [scored] = r.score_many([logits], [torch.full((8,), MASK)], [noises[0]], 1.0)
    assert any(
        scored.decide(r, s) != r(logits, s, noises[1], 1.0)
        for s in (torch.full((8,), MASK), torch.tensor([1] + [MASK] * 7))
    )

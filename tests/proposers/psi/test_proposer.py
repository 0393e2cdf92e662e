"""Psi-Spec proposers: every row token-exact against plain AR decoding at T=0 and T=1 (fast and
exactness mode), the draft forward leaves the target's cache as it found it and is counted, the tree
is prefix-closed and grown best-first, and the registry's settings are checked."""

from __future__ import annotations

import functools

import pytest
import torch

from harness.bundled import ZOO_DIR
from harness.decoding.autoregressive import ARConfig, ARDraftRequest, ar_decode, ar_plain_decode
from harness.decoding.noise import NoiseSource
from harness.errors import UserError
from harness.targets.ar import ARTarget, tiny_random_ar
from proposers.psi import family as psi_family
from proposers.psi import proposer as psi_spec
from proposers.psi.lora import GatedLoRAModel, save_drafter, weights_hash
from proposers.psi.proposer import PsiLinear, PsiTree
from proposers.registry import build_proposer, check_arm_for_model, check_proposer

PROMPT = list(range(40, 64))


@functools.cache
def tiny() -> ARTarget:
    return tiny_random_ar(0)


def random_drafter(base: torch.nn.Module) -> GatedLoRAModel:
    """A drafter whose LoRA is not zero, so drafts differ from what the base alone would say."""
    drafter = GatedLoRAModel(base, rank=4, alpha=8.0)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in drafter.lora_state().values():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    return drafter


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(
    "make",
    [lambda d: PsiLinear(d), lambda d: PsiLinear(d, 3), lambda d: PsiTree(d, 5, 3), lambda d: PsiTree(d, 4, 2, 6)],
)
def test_token_exact_against_plain_decoding(temperature, make):
    target = tiny()
    for drafter in (GatedLoRAModel(target.model, 4, 8.0), random_drafter(target.model)):
        config = ARConfig(24, temperature, seed=5)
        plain = ar_plain_decode(target, PROMPT, config)
        proposer = make(drafter)
        spec = ar_decode(target, PROMPT, proposer, config, 8)
        assert spec.tokens.tolist() == plain.tokens.tolist()
        assert spec.metrics.nfe < plain.metrics.nfe  # the free token alone makes every drafting pass commit >= 2
        # one draft forward per pass, but none on the first (nothing cached yet) or when no draft fits before the end
        assert 1 <= spec.metrics.draft_target_forwards == proposer.forwards.target <= spec.metrics.nfe - 1


def test_exactness_mode_is_token_exact():
    target = tiny().exact()
    config = ARConfig(30, 1.0, seed=2)
    plain = ar_plain_decode(target, PROMPT, config)
    spec = ar_decode(target, PROMPT, PsiTree(random_drafter(target.model), 5, 3), config, 10)
    assert torch.equal(spec.tokens, plain.tokens)


def test_the_draft_forward_leaves_the_cache_and_gives_the_exact_next_token():
    target = tiny()
    session = target.start(PROMPT)
    session.forward(torch.tensor([], dtype=torch.long), [])
    session.commit([], 7)
    keys = [k.clone() for k, _ in session.stored()]
    logits = psi_spec.draft_block(random_drafter(target.model), session, 4)
    assert [k.shape for k, _ in session.stored()] == [k.shape for k in keys]
    assert all(torch.equal(k, kept) for (k, _), kept in zip(session.stored(), keys))
    root = session.forward(torch.tensor([], dtype=torch.long), [])[0]
    assert logits.shape[0] == 5 and int(logits[0].argmax()) == int(root.argmax())


def test_the_tree_is_prefix_closed_best_first_and_sized():
    target = tiny()
    session = target.start(PROMPT)
    session.forward(torch.tensor([], dtype=torch.long), [])
    session.commit([], 7)
    context = torch.tensor(PROMPT + [7])
    request = ARDraftRequest(context, len(PROMPT), NoiseSource(1, 1, target.vocab_size), 1.0, 12, session)
    tree = PsiTree(random_drafter(target.model), 4, 3).propose(request)
    assert len(tree.nodes) == 12 and tree.nodes[0].parent == 0
    depth = {0: 0}
    for j, node in enumerate(tree.nodes, start=1):
        assert node.parent < j and node.transition.positions[0] == depth[node.parent]
        depth[j] = depth[node.parent] + 1
    assert max(depth.values()) <= 4
    linear = PsiLinear(random_drafter(target.model), 4).propose(request)
    assert [n.transition.tokens for n in linear.nodes[:1]] == [tree.nodes[0].transition.tokens]
    assert len(linear.nodes) == 4


def test_registry_settings_and_model_check(tmp_path):
    drafter = GatedLoRAModel(tiny().model, rank=4, alpha=8.0)
    save_drafter(
        drafter,
        tmp_path,
        {"base": "tiny-random-ar:0", "base_hash": weights_hash(tiny().model), "rank": 4, "alpha": 8.0, "max_block": 4},
    )
    assert check_proposer(f"psi-tree:{tmp_path}:B=5,K=2,V=9").trained_on == "tiny-random-ar:0"
    for bad, words in [
        (":B=6", "B=6 is out of range 1..5"),
        (":V=0", "V=0 is out of range"),
        (":K=2", "cannot parse 'K=2'"),
        (":X=1", "cannot parse"),
    ]:
        name = "psi-linear" if bad == ":K=2" else "psi-tree"
        with pytest.raises(UserError, match=words):
            check_proposer(f"{name}:{tmp_path}{bad}")
    with pytest.raises(UserError, match="needs a drafter folder"):
        check_proposer("psi-linear")
    with pytest.raises(UserError, match="is a drafter for model 'tiny-random-ar:0', not 'smollm2'"):
        check_arm_for_model(f"psi-linear:{tmp_path}", "smollm2", 32)
    proposer = build_proposer(f"psi-tree:{tmp_path}:K=2,V=6", tiny(), None)
    assert isinstance(proposer, PsiTree) and (proposer.top_k, proposer.nodes, proposer.width) == (2, 6, 5)
    with pytest.raises(UserError, match="was trained for base model"):
        build_proposer(f"psi-linear:{tmp_path}", tiny_random_ar(1), None)


def test_a_drafter_is_named_by_its_folder_under_zoo_drafters():
    assert check_proposer("psi-linear:psi-ar-a").trained_on == "ar-a"
    assert psi_family.parse_psi("psi-tree", "psi-ar-a:K=2").folder == ZOO_DIR / "drafters" / "psi-ar-a"


def test_rejection_mode_at_t0_is_greedy_decoding():
    """psi-linear's draft distributions drive the rejection-sampling loop; at T=0 that loop is greedy
    decoding token for token (the distributional proof at T>0 is the loop's own test)."""
    from harness.decoding.ar_rejection import ar_rejection_decode

    target = tiny()
    config = ARConfig(24, 0.0, seed=4)
    spec = ar_rejection_decode(target, PROMPT, PsiLinear(random_drafter(target.model)), config, 4)
    assert torch.equal(spec.tokens, ar_plain_decode(target, PROMPT, config).tokens)
    assert spec.metrics.draft_target_forwards >= 1

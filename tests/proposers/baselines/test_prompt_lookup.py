"""Prompt lookup drafts what transformers' PromptLookupCandidateGenerator proposes; registry kinds."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from harness.decoding.autoregressive import ARDraftRequest
from harness.errors import UserError
from proposers import build_proposer, check_proposer
from proposers.baselines.prompt_lookup import MAX_NGRAM, PromptLookupProposer
from proposers.registry import check_arm_for_model, proposers_for


def drafted(context: list[int], budget: int) -> list[int]:
    request = ARDraftRequest(torch.tensor(context), 1, None, 0.0, budget)
    tree = PromptLookupProposer().propose(request)
    assert all(node.parent == j and node.transition.positions == (j,) for j, node in enumerate(tree.nodes))
    return [node.transition.tokens[0] for node in tree.nodes]


@settings(max_examples=300, deadline=None)
@given(context=st.lists(st.integers(0, 5), min_size=1, max_size=40), budget=st.integers(1, 10))
def test_drafts_what_transformers_prompt_lookup_proposes(context, budget):
    reference = PromptLookupCandidateGenerator(
        num_output_tokens=budget, max_matching_ngram_size=MAX_NGRAM, max_length=10_000
    )
    ids = torch.tensor([context])
    candidates, _ = reference.get_candidates(ids)
    assert drafted(context, budget) == candidates[0, len(context) :].tolist()


def test_the_longest_ngram_and_its_first_occurrence_win():
    # last 3 tokens (1, 2, 3) occur at 0 and 5: the first occurrence's continuation is drafted
    assert drafted([1, 2, 3, 7, 8, 1, 2, 3, 9, 4, 1, 2, 3], 2) == [7, 8]
    # no 3-gram or 2-gram match, the 1-gram 4 does: what followed its first occurrence
    assert drafted([4, 5, 6, 4], 3) == [5, 6, 4]
    assert drafted([1, 2, 3], 4) == [] and drafted([1, 1], 0) == []


def test_registry_kinds_and_validation():
    assert check_proposer("prompt-lookup").kind == "baseline"
    assert proposers_for("ar")[:3] == ["oracle", "prompt-lookup", "draft-model"]
    assert not {"prompt-lookup", "draft-model"} & set(proposers_for("dlm"))
    assert "prompt-lookup" not in proposers_for("dlm") and "oracle" in proposers_for("dlm")
    check_arm_for_model("prompt-lookup", "tiny-random-ar", 32)
    check_arm_for_model("oracle", "tiny-random-ar", 32)
    with pytest.raises(UserError, match=r"drafts for diffusion .* 'tiny-random-ar' is autoregressive"):
        check_arm_for_model("spot", "tiny-random-ar", 32)
    with pytest.raises(UserError, match=r"drafts for autoregressive .* 'tiny-random:sdar' is diffusion"):
        check_arm_for_model("prompt-lookup", "tiny-random:sdar", 32)
    with pytest.raises(UserError, match="takes no argument"):
        check_proposer("prompt-lookup:3")
    assert isinstance(build_proposer("prompt-lookup", None, None), PromptLookupProposer)

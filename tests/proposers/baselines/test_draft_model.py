"""The draft-model baseline: token-exact in coupled mode at T=0 and T=1 (exactness mode), greedy in
rejection mode at T=0, its own KV cache rewound to what the target committed, its forwards counted
apart from the target's, and one-line refusals (no model, another tokenizer, rejection mode without q
or on a diffusion target)."""

from __future__ import annotations

import functools
from typing import cast

import pytest
import torch

from cluster.suite import build_suite
from harness.decoding.ar_rejection import DistributionProposer, ar_rejection_decode
from harness.decoding.autoregressive import ARConfig, ARDraftRequest, ARProposer, ar_decode, ar_plain_decode
from harness.errors import UserError
from harness.lossless import check_lossless
from harness.targets.ar import ARTarget
from harness.targets.registry import load_ar_only
from proposers import build_proposer
from proposers.baselines.draft_model import DraftModelProposer, check_draft_fits, check_same_vocabulary

PROMPT = list(b"the cat sat on the mat; the cat")


@functools.cache
def exact_target(name: str = "tiny-random-ar") -> ARTarget:
    return load_ar_only(name).exact()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("draft", ["tiny-random-ar", "tiny-random-ar:1"])
def test_coupled_mode_is_plain_decoding_token_for_token(temperature, draft) -> None:
    target, config = exact_target(), ARConfig(24, temperature, 5)
    plain = ar_plain_decode(target, PROMPT, config)
    proposer = cast(ARProposer, build_proposer(f"draft-model:{draft}", target, plain))
    spec = ar_decode(target, PROMPT, proposer, config, 3)
    assert check_lossless(plain, spec, 1e-9).exact
    assert spec.metrics.draft_model_forwards > 0 and spec.metrics.draft_target_forwards == 0
    assert spec.metrics.target_forwards == spec.metrics.nfe
    if draft == "tiny-random-ar":  # the target drafting for itself: every draft accepted
        assert spec.pass_commits == [4] * 6


def test_rejection_mode_at_temperature_zero_is_greedy_and_counts_forwards() -> None:
    target, config = exact_target(), ARConfig(24, 0.0, 0)
    plain = ar_plain_decode(target, PROMPT, config)
    proposer = cast(DistributionProposer, build_proposer("draft-model:tiny-random-ar", target, plain))
    spec = ar_rejection_decode(target, PROMPT, proposer, config, 3)
    assert spec.tokens.tolist() == plain.tokens.tolist() and spec.pass_commits == [4] * 6
    # one forward per draft token (the first of each pass also feeds the tokens its cache lacks)
    assert spec.metrics.draft_model_forwards == spec.metrics.draft_nodes == 3 * 6


def test_the_cache_is_rewound_to_the_committed_context() -> None:
    draft = load_ar_only("tiny-random-ar:1")
    proposer = DraftModelProposer(draft)
    contexts = [PROMPT, PROMPT + [7, 8], PROMPT + [7, 9, 10, 11], PROMPT[:5]]
    for context in contexts:
        _, rows = proposer._draft(ARDraftRequest(torch.tensor(context), len(PROMPT), None, 0.0, 2))
        with torch.inference_mode():
            fresh = draft.model(input_ids=torch.tensor([context])).logits[0, -1]
        torch.testing.assert_close(rows[0], fresh, rtol=1e-5, atol=1e-5)
        assert proposer.cached[: len(context)] == context


def test_a_draft_model_must_share_the_tokenizer(tmp_path) -> None:
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"a": 0, "b": 1, "<unk>": 2}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")), eos_token="<unk>"
    )
    config = LlamaConfig(
        vocab_size=3,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(UserError, match="another tokenizer than model 'tiny-random-ar'"):
        check_draft_fits(str(tmp_path), "tiny-random-ar")
    check_draft_fits("tiny-random-ar:1", "tiny-random-ar")
    with pytest.raises(UserError, match="scores 3 tokens"):
        check_same_vocabulary(load_ar_only(str(tmp_path)), load_ar_only("tiny-random-ar"), str(tmp_path))
    with pytest.raises(UserError, match="another tokenizer"):
        build_suite({}, {"models": "tiny-random-ar", "proposers": f"draft-model:{tmp_path}"})


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"proposers": "draft-model"}, "needs a model: draft-model:NAME"),
        ({"proposers": "draft-model:tiny-random:sdar"}, "not an autoregressive model"),
        ({"proposers": "prompt-lookup", "ar_sampling": "rejection"}, "needs the draft distributions q"),
        (
            {"models": "tiny-random:sdar", "proposers": "confidence", "ar_sampling": "rejection"},
            "is for autoregressive targets",
        ),
        ({"ar_sampling": "both"}, "must be coupled or rejection"),
    ],
)
def test_bad_settings_are_one_line(flags, message) -> None:
    with pytest.raises(UserError, match=message):
        build_suite({}, {"models": "tiny-random-ar", "proposers": "draft-model:tiny-random-ar:1"} | flags)


def test_the_cli_refuses_rejection_mode_without_q_in_one_line(capsys) -> None:
    from spotbench.cli import main

    assert (
        main(
            [
                "decode",
                "--model",
                "tiny-random-ar",
                "--proposer",
                "prompt-lookup",
                "--prompt",
                "hi",
                "--ar-sampling",
                "rejection",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs the draft distributions q" in err and "Traceback" not in err

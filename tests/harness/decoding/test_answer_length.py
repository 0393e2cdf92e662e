"""What a block-causal generation returns as its answer follows the family's published generate:
LLaDA2's ends at gen_length (`x[:, :P + gen_length]`), SDAR's is the whole canvas to the end of the
last block. Every committed position stays in `Generation.tokens` for the lossless check."""

import pytest

from harness.decoding import DecodeConfig, parse_rule, plain_decode, speculative_decode
from harness.decoding.replay import replay
from harness.targets.registry import load_dlm_target
from proposers import build_proposer

PROMPT = [(37 * i + 11) % 200 + 30 for i in range(11)]  # 11 tokens: the first block holds 3 of them
GEN_LENGTH, BLOCK = 10, 8  # answer positions 0-9 end mid-block: decoding runs to 13 (position 24)


def decode(family: str):
    target = load_dlm_target(f"tiny-random:{family}:2")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), GEN_LENGTH, BLOCK, 0.0, 3)
    plain = plain_decode(target, PROMPT, config, keep_logits=True)
    assert len(plain.tokens) == 13 and target.eos_id not in plain.tokens.tolist()  # the setting holds
    return target, config, plain


def test_llada2_answers_end_at_gen_length():
    target, config, plain = decode("llada2")
    assert plain.answer_ids == plain.tokens.tolist()[:GEN_LENGTH]
    spec = speculative_decode(target, PROMPT, build_proposer("confidence", target, plain), config, 4)
    assert spec.tokens.tolist() == plain.tokens.tolist() and spec.answer_ids == plain.answer_ids
    assert replay(plain, build_proposer("confidence", target, plain), config, 4).answer_ids == plain.answer_ids


def test_sdar_answers_keep_the_whole_canvas():
    """The control: the same geometry on SDAR returns every decoded position."""
    _, _, plain = decode("sdar")
    assert plain.answer_ids == plain.tokens.tolist() and len(plain.answer_ids) > GEN_LENGTH


@pytest.mark.parametrize("family", ["llada2", "sdar"])
def test_an_eos_still_cuts_first(family):
    target, _config, plain = decode(family)
    eos_at = 4
    plain.tokens[eos_at] = target.eos_id
    assert plain.answer_ids == plain.tokens.tolist()[:eos_at]

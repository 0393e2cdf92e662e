"""Shared fixtures: a real transformers tokenizer with a chat template, and one without; the two
forms a hostile program is jailed in (with the audit hook and with the jail alone)."""

from __future__ import annotations

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tokenizer(chat_template: str | None):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tokenizer.chat_template = chat_template
    return tokenizer


@pytest.fixture(scope="session")
def chat_tokenizer():
    return make_tokenizer(CHAT_TEMPLATE)


@pytest.fixture(scope="session")
def base_tokenizer():
    return make_tokenizer(None)


@pytest.fixture(params=[True, False], ids=["jail+hook", "jail-only"])
def hook(request) -> bool:
    return request.param

from tasks.base import SelfCheck, cut, render


def test_cut_stops_at_the_earliest_stop_string():
    assert cut("a #### 3\n\nQuestion: next", ("Question:", "\n\n")) == "a #### 3"
    assert cut("no stop here", ("Question:",)) == "no stop here"
    assert cut("", ("x",)) == ""


def test_render_uses_the_chat_template_only_when_there_is_one(chat_tokenizer, base_tokenizer):
    assert render("user text", "RAW", None) == "RAW"
    assert render("user text", "RAW", base_tokenizer) == "RAW"
    chat = render("user text", "RAW", chat_tokenizer, prefill="[BEGIN]\n")
    assert chat == "<|user|>user text<|end|><|assistant|>[BEGIN]\n"


def test_self_check_verdict_respects_allowed_failures():
    assert SelfCheck("t", 10, 10, [], 0).ok
    assert SelfCheck("t", 10, 9, ["x"], 1).ok
    assert not SelfCheck("t", 10, 9, ["x"], 0).ok
    assert not SelfCheck("t", 0, 0, [], 0).ok  # checking nothing proves nothing

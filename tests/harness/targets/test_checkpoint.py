"""Checkpoint folders: published layouts load into the same function as the published math,
spotbench's own writer round-trips, and bad folders fail with one line naming the file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.errors import UserError
from harness.targets.checkpoint import load_checkpoint, save_checkpoint
from harness.targets.formats import FORMATS
from harness.targets.registry import load_target
from spotbench.cli import main

FAMILIES = ["llada", "dream", "sdar", "llada2"]
IDS = [72, 105, 33, 258, 258, 258, 258, 10, 258, 258, 44, 258]


def block_causal(length: int, block: int) -> torch.Tensor:
    ids = torch.arange(length) // block
    return ids[None, :] <= ids[:, None]


def allowed_for(family: str) -> torch.Tensor:
    if family in ("sdar", "llada2"):
        return block_causal(len(IDS), 4)
    return torch.ones(len(IDS), len(IDS), dtype=torch.bool)


def model_logits(target, allowed: torch.Tensor) -> torch.Tensor:
    ids = torch.tensor([IDS])
    attend = None if bool(allowed.all()) else allowed
    logits, _ = target.model(ids, torch.arange(len(IDS)), attend)
    return logits[0].double()


@pytest.mark.parametrize("family", FAMILIES)
def test_published_layout_matches_naive_reference(family, tmp_path, reference):
    config, weights = reference.write_published(family, tmp_path, shards=3 if family == "llada2" else 1)
    allowed = allowed_for(family)
    expected = reference.logits(family, config, weights, IDS, allowed)
    exact = model_logits(load_checkpoint(tmp_path, dtype=torch.float64), allowed)
    single = model_logits(load_checkpoint(tmp_path), allowed)
    print(
        f"{family}: float64 max diff {(exact - expected).abs().max():.2e}, "
        f"float32 {(single - expected).abs().max():.2e}"
    )
    assert (exact - expected).abs().max() <= 1e-10
    assert (single - expected).abs().max() <= 1e-4


VARIANTS = [(f, v) for f in FAMILIES for v in ("interleaved_rope", "swap_gate_up")] + [("llada2", "grouped_qkv")]


@pytest.mark.parametrize(("family", "variant"), VARIANTS)
def test_reference_comparison_catches_a_wrong_convention(family, variant, tmp_path, reference):
    """Negative control: a plausible misreading of the published layout must not pass."""
    config, weights = reference.write_published(family, tmp_path)
    allowed = allowed_for(family)
    wrong = reference.logits(family, config, weights, IDS, allowed, variant=variant)
    loaded = model_logits(load_checkpoint(tmp_path, dtype=torch.float64), allowed)
    assert (loaded - wrong).abs().max() > 1e-3


@pytest.mark.parametrize("family", FAMILIES)
def test_save_round_trip_uses_published_names(family, tmp_path, reference):
    target = load_target(f"tiny-random:{family}:3")
    save_checkpoint(target, tmp_path, max_shard_bytes=100_000 if family == "dream" else None)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "config.json" in files and "tokenizer.json" in files
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"].lower() in FORMATS[family].model_types
    written = set()
    for path in tmp_path.glob("*.safetensors"):
        written |= set(load_file(str(path)))
    assert written == set(FORMATS[family].tensor_map(target.model.cfg))
    loaded = load_checkpoint(tmp_path)
    ids, positions = torch.tensor([IDS]), torch.arange(len(IDS))
    assert torch.equal(loaded.model(ids, positions, None)[0], target.model(ids, positions, None)[0])
    assert (loaded.mask_id, loaded.eos_id, loaded.family) == (target.mask_id, target.eos_id, target.family)
    assert loaded.tokenizer.encode("hi") == target.tokenizer.encode("hi")


def test_saved_checkpoint_is_readable_by_the_reference(tmp_path, reference):
    """spotbench's writer produces the published layout, not just something its reader accepts."""
    target = load_target("tiny-random:llada2:1").exact()
    save_checkpoint(target, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    expected = reference.logits(
        "llada2", config, load_file(str(tmp_path / "model.safetensors")), IDS, allowed_for("llada2")
    )
    assert (model_logits(target, allowed_for("llada2")) - expected).abs().max() <= 1e-10


def test_save_refuses_a_model_the_format_cannot_express(tmp_path):
    with pytest.raises(UserError, match=r"llada checkpoint format cannot express.*qk_norm"):
        save_checkpoint(load_target("tiny-random:sdar"), tmp_path / "out", family="llada")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    with pytest.raises(UserError, match="non-empty"):
        save_checkpoint(load_target("tiny-random:sdar"), tmp_path / "busy")


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _edit_tensors(path, drop=(), add=None, replace=None):
    tensors = {n: t for n, t in load_file(str(path)).items() if n not in drop}
    tensors |= add or {}
    tensors |= replace or {}
    save_file(tensors, str(path))


BAD = {
    "no such folder": ("dream", lambda d: d / "nope", "nope: not a checkpoint folder"),
    "no config.json": ("dream", lambda d: (d / "config.json").unlink() or d, "no config.json"),
    "broken json": ("dream", lambda d: (d / "config.json").write_text("{") and d, "config.json: unreadable JSON"),
    "unknown family": (
        "dream",
        lambda d: _edit_config(d, model_type="gpt2") or d,
        "config.json: unknown target family",
    ),
    "missing shard": (
        "llada2",
        lambda d: (d / "model-00002-of-00003.safetensors").unlink() or d,
        "model.safetensors.index.json: shard model-00002-of-00003.safetensors is missing",
    ),
    "rope scaling": (
        "sdar",
        lambda d: _edit_config(d, rope_scaling={"rope_type": "yarn", "factor": 4.0}) or d,
        "config.json: unsupported rope_scaling",
    ),
    "activation": (
        "llada",
        lambda d: _edit_config(d, activation_type="gelu") or d,
        "config.json: unsupported activation_type='gelu'",
    ),
    "dense bias": ("llada2", lambda d: _edit_config(d, use_bias=True) or d, "unsupported use_bias=True"),
    "kv heads": (
        "sdar",
        lambda d: _edit_config(d, num_key_value_heads=3) or d,
        "config.json: 4 attention heads do not split into 3 key/value heads",
    ),
    "missing key": (
        "dream",
        lambda d: _edit_config(d, hidden_size=None) or d,
        "config.json: hidden_size must be a non-negative integer",
    ),
    "shape mismatch": (
        "dream",
        lambda d: _edit_config(d, intermediate_size=40) or d,
        (
            "model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape [48, 32], "
            "but config.json implies [40, 32]"
        ),
    ),
    "missing tensor": (
        "sdar",
        lambda d: _edit_tensors(d / "model.safetensors", drop=["model.layers.1.self_attn.k_norm.weight"]) or d,
        "model.safetensors: missing tensor model.layers.1.self_attn.k_norm.weight",
    ),
    "unexpected tensor": (
        "llada",
        lambda d: _edit_tensors(d / "model.safetensors", add={"model.transformer.extra": torch.zeros(2)}) or d,
        "model.safetensors: unexpected tensor model.transformer.extra",
    ),
    "no weights": ("dream", lambda d: (d / "model.safetensors").unlink() or d, "no model.safetensors or"),
    "not safetensors": (
        "dream",
        lambda d: (d / "model.safetensors").write_bytes(b"junk") and d,
        "model.safetensors: not a readable safetensors file",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_checkpoint_is_one_line_user_error(case, tmp_path, reference, capsys):
    family, damage, message = BAD[case]
    reference.write_published(family, tmp_path / "ck", shards=3 if family == "llada2" else 1)
    folder = damage(tmp_path / "ck")
    with pytest.raises(UserError) as error:
        load_checkpoint(folder)
    text = str(error.value)
    assert message in text and "\n" not in text, text
    assert main(["target", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("spotbench: error: ") and "Traceback" not in err


def test_dream_remote_code_tokenizer_is_read_from_its_bpe_files(tmp_path, reference):
    """Dream ships a remote-code `DreamTokenizer` (Qwen2's BPE) and no tokenizer.json; spotbench
    must neither run nor ask to run that code, and still get the same tokens and ids."""
    reference.write_published("dream", tmp_path)
    spec = json.loads((tmp_path / "tokenizer.json").read_text())
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "vocab.json").write_text(json.dumps(spec["model"]["vocab"]))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    special = {str(t["id"]): t | {"special": True} for t in spec["added_tokens"]}
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "DreamTokenizer",
                "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
                "added_tokens_decoder": special,
                "eos_token": "<|eos|>",
                "pad_token": "<|pad|>",
                "mask_token": "<|mask|>",
            }
        )
    )
    target = load_checkpoint(tmp_path)
    assert target.tokenizer.encode("hi there") == [71, 72, 220, 83, 71, 68, 81, 68]
    assert target.tokenizer.mask_token_id == target.mask_id == 258


@pytest.mark.slow
def test_cli_describes_a_checkpoint_folder_and_exits_2_on_a_bad_one(tmp_path, reference):
    reference.write_published("llada2", tmp_path / "ok", shards=2)
    reference.write_published("sdar", tmp_path / "bad")
    _edit_config(tmp_path / "bad", model_type="sdar_moe")
    run = [sys.executable, "-m", "spotbench.cli", "target"]
    ok = subprocess.run([*run, str(tmp_path / "ok"), "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    info = json.loads(ok.stdout)
    assert (info["family"], info["moe_experts"], info["mask_id"], info["eos_id"]) == ("llada2", 8, 258, 257)
    bad = subprocess.run([*run, str(tmp_path / "bad")], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "unknown target family" in bad.stderr, bad.stderr

"""`spotbench convert` refuses a bad recipe with one line and exit 2, before it loads anything or
writes its run folder."""

from pathlib import Path

import pytest

from spotbench.cli import main

RECIPE = """name: c
base: smollm2
tasks: [arith]
"""


@pytest.mark.parametrize(
    "line, message",
    [
        ("block_length: 1", "leaves the adapter nothing to learn"),
        ("dtype: float16", "dtype Input should be 'float32' or 'bfloat16'"),
        ("rank: 0", "rank"),
        ("colour: red", "colour"),
    ],
)
def test_a_bad_recipe_is_one_line_and_nothing_is_written(tmp_path, capsys, line: str, message: str) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE + line + "\n")
    assert main(["convert", str(recipe), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_diffusion_base_is_refused(tmp_path, capsys) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.replace("smollm2", "sdar-a"))
    assert main(["convert", str(recipe), "--out", str(tmp_path / "out")]) == 2
    assert "not an autoregressive target" in capsys.readouterr().err


def _tiny_conversion(folder) -> None:
    import torch

    from harness.targets import adapter
    from harness.targets.ar import tiny_random_ar
    from harness.targets.converted import convert, save_converted

    base = tiny_random_ar(1)
    target = convert(base, mask_id=5, rank=4, alpha=8.0)
    generator = torch.Generator().manual_seed(0)
    for parameter in adapter.lora_state(target.model).values():
        parameter.data = torch.randn(parameter.shape, generator=generator) * 0.2
    save_converted(
        target,
        folder,
        {"base": "tiny-random-ar:1", "base_hash": adapter.weights_hash(base.model), "rank": 4, "alpha": 8.0},
    )


@pytest.mark.parametrize("temperature", ["0", "1"])
def test_a_converted_folder_decodes_losslessly_through_the_cli(tmp_path, capsys, temperature: str) -> None:
    _tiny_conversion(tmp_path / "conv")
    args = [
        "decode",
        "--model",
        str(tmp_path / "conv"),
        "--prompt",
        "abc",
        "--proposer",
        "confidence",
        "--budget",
        "4",
        "--gen-length",
        "10",
        "--block-length",
        "4",
        "--temperature",
        temperature,
    ]
    assert main(args) == 0
    assert "lossless: exact" in capsys.readouterr().out


def test_target_describes_a_converted_folder_and_a_broken_one_is_one_line(tmp_path, capsys) -> None:
    _tiny_conversion(tmp_path / "conv")
    assert main(["target", str(tmp_path / "conv")]) == 0
    assert "converted" in capsys.readouterr().out
    (tmp_path / "conv" / "adapter.safetensors").write_bytes(b"not safetensors")
    assert main(["target", str(tmp_path / "conv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "adapter.safetensors" in err and len(err.splitlines()) == 1


def test_a_converted_targets_inputs_hash_its_delta_and_its_base(tmp_path) -> None:
    from cluster.provenance import run_inputs
    from cluster.suite import Suite

    _tiny_conversion(tmp_path / "conv")
    checkpoints = run_inputs(Suite(models=[str(tmp_path / "conv")], proposers=["confidence"]))["checkpoints"]
    assert str(tmp_path / "conv") in checkpoints  # adapter.safetensors and converted.json
    assert f"{tmp_path / 'conv'} base tiny-random-ar:1" not in checkpoints  # a base built in code has no files


def test_an_out_folder_that_holds_something_else_is_refused(tmp_path, capsys) -> None:
    """--out zoo/models/sdar-a would have had its model/ replaced by the conversion's."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    other = tmp_path / "other"
    (other / "model").mkdir(parents=True)
    (other / "model" / "config.json").write_text("{}")
    assert main(["convert", str(recipe), "--out", str(other)]) == 2
    assert "not a conversion run" in capsys.readouterr().err
    assert (other / "model" / "config.json").read_text() == "{}"


TINY = """name: c
base: tiny-random-ar:1
tasks: [arith]
optimizer: {steps: 1, batch_size: 2}
validation_examples: 2
"""


def _refused(tmp_path, capsys, recipe: str, out, message: str) -> str:
    """Exit 2, one stderr line holding `message`, no traceback, and no --out folder made."""
    (tmp_path / "r.yaml").write_text(recipe)
    assert main(["convert", str(tmp_path / "r.yaml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotbench: error: ") and err.count("\n") == 1 and message in err, err
    assert not out.exists()
    return err


def test_a_block_length_past_the_bases_context_is_refused_before_the_base_loads(tmp_path, capsys, monkeypatch) -> None:
    """smollm2's context (8192 positions) is read from its GGUF header: a block of 100000 positions
    would have allocated masks of tens of GB before failing."""
    import harness.targets.registry

    def no_loading(*args, **kwargs):
        raise AssertionError("the base was loaded")

    monkeypatch.setattr(harness.targets.registry, "load_target", no_loading)
    message = "block_length 100000 is longer than base smollm2's context (8192 positions"
    _refused(tmp_path, capsys, RECIPE + "block_length: 100000\n", tmp_path / "out", message)
    longest = "prompt_max_tokens: 8000\nanswer_max_tokens: 8000\n"  # blocks that fit, sequences that do not
    _refused(tmp_path, capsys, RECIPE + longest, tmp_path / "out", "sequences of up to 16004 positions")


def test_a_batch_whose_attention_masks_do_not_fit_in_memory_is_refused(tmp_path, capsys, monkeypatch) -> None:
    """Block length 4000 fits tiny-random-ar's context (4096) but not in 1 MiB: the layout's masks
    ([batch, 1, C, C] and [batch, 1, L, C + L] bool) are estimated before anything is allocated."""
    import harness.training.convert

    monkeypatch.setattr(harness.training.convert, "available_memory", lambda: 2**20)
    err = _refused(tmp_path, capsys, TINY + "block_length: 4000\n", tmp_path / "out", "for its attention masks alone")
    assert "0.04 GiB" in err and "this machine has 0.00 GiB available" in err and "block_length 4000" in err


def test_an_out_folder_that_cannot_be_written_is_refused_before_the_base_loads(tmp_path, capsys) -> None:
    """Root writes through permission bits, so the unwritable places are a file's child and /proc."""
    (tmp_path / "file").write_text("x")
    _refused(tmp_path, capsys, TINY, tmp_path / "file" / "out", f"{tmp_path / 'file'} is a file, not a folder")
    _refused(tmp_path, capsys, TINY, Path("/proc/spotbench-convert-out"), "cannot write in /proc")


def test_a_missing_base_path_is_named_as_missing(tmp_path, capsys) -> None:
    missing = tmp_path / "no-such-model"
    _refused(
        tmp_path, capsys, RECIPE.replace("smollm2", str(missing)), tmp_path / "out", f"base {missing} does not exist"
    )

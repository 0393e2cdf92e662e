"""`spotbench convert` refuses a bad recipe with one line and exit 2, before it loads anything or
writes its run folder."""

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

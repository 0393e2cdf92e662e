"""`spotbench convert` refuses a bad recipe with one line and exit 2, before it loads anything or
writes its run folder."""

import pytest

from spotbench.cli import main

RECIPE = """name: c
base: smollm2
tasks: [arith]
"""


@pytest.mark.parametrize("line, message", [
    ("block_length: 1", "leaves the adapter nothing to learn"),
    ("dtype: float16", "dtype Input should be 'float32' or 'bfloat16'"),
    ("rank: 0", "rank"),
    ("colour: red", "colour"),
])
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

"""SPOT training: trajectories are plain decoding's, examples are what the proposer sees, runs are
deterministic and carry their provenance."""

from __future__ import annotations

import json

import pytest

from harness.decoding import DecodeConfig, parse_rule, plain_decode
from harness.targets.registry import load_target
from proposers.spot import CONFIG_FILE, MASKED, WEIGHTS_FILE, SpotConfig, load_spot
from proposers.spot_training import SpotRecipe, collect, train

PROMPT = list(b"Q: 2+2=?\nA:")


@pytest.mark.parametrize("family", ["sdar", "llada"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_collected_trajectory_is_plain_decoding_and_examples_are_consistent(family, temperature):
    target = load_target(f"tiny-random:{family}")
    views, positions = collect(target, PROMPT, 16, 8, temperature, 4, SpotConfig(max_depth=5))
    cfg = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, temperature, 4)
    assert positions == [t.positions[0] for t in plain_decode(target, PROMPT, cfg).steps]
    blocks = [positions[:8], positions[8:]]
    for ages, depth, label in zip(views.ages.long(), views.depth.tolist(), views.label.tolist()):
        made = int((ages != MASKED).sum())
        recent = [int((ages == k).nonzero()) for k in range(min(made, depth + 1))][::-1]
        assert made >= depth and int(((ages >= 0) & (ages <= depth)).sum()) == len(recent)
        # some block's true order: the commits so far, the latest of them (the root's last and the
        # path) in order, then the label
        assert any(sorted(b[:made]) == sorted((ages != MASKED).nonzero().squeeze(1).tolist())
                   and b[made - len(recent) : made + 1] == recent + [label] for b in blocks)
    block_start = (views.ages == MASKED).all(1) & (views.depth == 0)
    # full attention hands the next block's logits over as a stale view with nothing committed
    assert bool(block_start.any()) == (not target.family.caches_finished_blocks)
    assert 0 <= int(views.view.max()) < views.static.shape[0]


def test_training_is_deterministic_and_records_provenance(tmp_path):
    recipe = SpotRecipe(name="t", target="tiny-random:sdar", tasks={"arith": 2}, temperatures=(0.0, 1.0),
                        gen_length=16, block_length=8, steps=3, batch_size=8, warmup_steps=1,
                        validation_fraction=0.25, model={"width": 16, "layers": 1, "heads": 2, "ffn": 32})
    target = load_target(recipe.target)
    first = train(recipe, target, tmp_path / "run1", tmp_path / "out1")
    second = train(recipe, target, tmp_path / "run2", tmp_path / "out2")
    assert first["validation"] == second["validation"]
    assert (tmp_path / "out1" / WEIGHTS_FILE).read_bytes() == (tmp_path / "out2" / WEIGHTS_FILE).read_bytes()
    meta = json.loads((tmp_path / "out1" / CONFIG_FILE).read_text())
    assert meta["provenance"]["target"] == "tiny-random:sdar" and meta["provenance"]["data"] == ["arith/train"]
    revision = meta["provenance"]["git_revision"]
    assert revision is None or len(revision.removesuffix("+dirty")) == 40
    reloaded = train(recipe, target, tmp_path / "run1", tmp_path / "out3")  # resumes: nothing left to do
    assert reloaded["validation"] == first["validation"]
    assert load_spot(tmp_path / "out1").config.width == 16
    changed = SpotRecipe(**{**recipe.__dict__, "seed": 1})
    with pytest.raises(Exception, match="different recipe"):
        train(changed, target, tmp_path / "run1", tmp_path / "out4")

"""The lm-eval adapter, through the real lm-eval package, offline, on a local GSM8K task config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml

from harness.decoding import DecodeConfig, parse_rule, plain_decode
from harness.targets.registry import load_dlm_target
from spotbench.cli import main
from spotbench.lm_eval_model import SpotbenchLM  # importing it registers the model with lm-eval
from tasks.base import cut
from tasks.data import data_dir

ARGS = "model=sdar-a,proposer=spot,budget=8,gen_length=16,block_length=8,untrained_block_length=true"
UNTIL = ["Question:", "\n\n\n"]
SHIPPED = Path(__file__).resolve().parents[2] / "tasks" / "lm_eval" / "gsm8k_local.yaml"


def gsm8k_config(folder, monkeypatch) -> None:
    """The shipped lm-eval task config (tasks/lm_eval/gsm8k_local.yaml), which reads the local GSM8K
    files as spotbench's own tasks find them, run from `folder` (not the checkout): `spotbench lm-eval`
    includes it without an --include_path."""
    data = data_dir()[0]
    if not (data / "gsm8k_test.jsonl").is_file():
        pytest.skip(f"no local GSM8K file in {data}")
    config = yaml.safe_load(SHIPPED.read_text().replace("!function ", ""))
    assert config["generation_kwargs"]["until"] == UNTIL
    monkeypatch.chdir(folder)


@pytest.mark.slow  # two GSM8K prompts decoded twice each, through lm-eval's command line
def test_gsm8k_through_lm_eval_is_checked_and_logged(tmp_path, monkeypatch) -> None:
    gsm8k_config(tmp_path, monkeypatch)
    assert (
        main(
            [
                "lm-eval",
                "--model",
                "spotbench",
                "--model_args",
                ARGS,
                "--tasks",
                "gsm8k_local",
                "--limit",
                "2",
                "--log_samples",
                "--output_path",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    [results_file] = (tmp_path / "out").glob("*/results_*.json")
    [samples_file] = (tmp_path / "out").glob("*/samples_gsm8k_local_*.jsonl")
    results = json.loads(results_file.read_text())
    results["samples"] = {"gsm8k_local": [json.loads(line) for line in samples_file.read_text().splitlines()]}
    info = results["config"]["spotbench"]
    assert info["samples"] == 2 and info["exact"] == 2 and info["lossless"] and info["verdicts"] == {"exact": 2}
    assert info["spec_nfe"] < info["plain_nfe"]
    assert "exact_match,strict-match" in results["results"]["gsm8k_local"]
    target = load_dlm_target("sdar-a")
    config = DecodeConfig(parse_rule("top1", target.family, target.mask_id), 16, 8, 0.0, 0)
    samples = results["samples"]["gsm8k_local"]
    for sample in samples:
        context, gen_kwargs = sample["arguments"]["gen_args_0"].values()
        record = gen_kwargs["spotbench"]  # the verdict and pass counts travel with the logged sample
        plain = plain_decode(target, target.tokenizer.encode(context, add_special_tokens=False), config)
        # top1: one pass per answer position, to the end of the block holding position 15 (absolute grid)
        assert record["verdict"] == "exact" and record["plain_nfe"] == plain.metrics.nfe == len(plain.tokens) >= 16
        assert record["spec_nfe"] < record["plain_nfe"]
        # what lm-eval scored is plain decoding's answer, cut at the task's stop strings
        assert sample["resps"] == [[cut(target.tokenizer.decode(plain.answer_ids), tuple(UNTIL))]]
    strict = [s for s in samples if s["filter"] == "strict-match"]  # lm-eval logs a sample once per filter
    for count in ("spec_nfe", "plain_nfe"):
        assert sum(s["arguments"]["gen_args_0"]["arg_1"]["spotbench"][count] for s in strict) == info[count]


@pytest.mark.slow  # a GSM8K prompt decoded twice
def test_a_corrupted_verifier_is_caught(monkeypatch) -> None:
    """Negative control: a speculative loop that commits one wrong token is reported, not scored as lossless."""
    from lm_eval.api.instance import Instance

    import harness.pipeline as pipeline

    honest = pipeline.speculative_generation

    def corrupted(*args, **kwargs):
        generation = yield from honest(*args, **kwargs)
        tokens = generation.tokens.clone()
        tokens[0] = (tokens[0] + 1) % 2048
        return dataclasses.replace(generation, tokens=tokens)

    monkeypatch.setattr(pipeline, "speculative_generation", corrupted)
    lm = SpotbenchLM.create_from_arg_string(ARGS, {"device": "cpu"})
    request = Instance(
        "generate_until", {}, ("Question: What is 2+3?\nAnswer:", {"until": UNTIL}), 0, ("gsm8k_local", 0, 1)
    )
    lm.generate_until([request])
    info = lm.get_model_info()["spotbench"]
    assert not info["lossless"] and info["exact"] == 0 and info["verdicts"] == {"logic-error": 1}
    assert request.args[1]["spotbench"]["verdict"] == "logic-error" and request.args[1]["until"] == UNTIL


def test_unknown_model_args_key_is_one_line() -> None:
    with pytest.raises(ValueError) as error:
        SpotbenchLM.create_from_arg_string("model=sdar-a,budgett=8")
    message = str(error.value)
    assert "\n" not in message and "unknown key 'budgett'" in message and "known keys: model, proposer" in message
    with pytest.raises(ValueError, match="model_args budget must be a whole number >= 0 or auto, got x"):
        SpotbenchLM.create_from_arg_string("model=sdar-a,budget=x")
    for key, flag in (("mask_id", "--mask-id"), ("eos_id", "--eos-id")):  # named by the key, not decode's flag
        with pytest.raises(ValueError) as error:
            SpotbenchLM.create_from_arg_string(f"model=sdar-a,{key}=99999")
        assert f"give model_args {key} below 2048" in str(error.value) and flag not in str(error.value)
    with pytest.raises(ValueError, match="model_args mask_id is for diffusion targets; ar-a is autoregressive"):
        SpotbenchLM.create_from_arg_string("model=ar-a,proposer=prompt-lookup,mask_id=3")


@pytest.mark.slow  # lm-eval prepares the task's data before it builds the model
def test_spotbench_lm_eval_prints_a_bad_key_as_one_line(capsys, tmp_path, monkeypatch) -> None:
    gsm8k_config(tmp_path, monkeypatch)
    assert (
        main(
            [
                "lm-eval",
                "--model",
                "spotbench",
                "--model_args",
                "model=sdar-a,budgett=8",
                "--tasks",
                "gsm8k_local",
                "--limit",
                "1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.endswith(
            "spotbench: error: spotbench model_args: unknown key 'budgett'; known keys: model, proposer, "
            "budget, rule, temperature, seed, gen_length, block_length, untrained_block_length, mask_id, eos_id, "
            "exact, dtype, "
            "device\n"
        )
        and "Traceback" not in err
    )


def test_the_model_is_registered_beside_lm_eval_own() -> None:
    from lm_eval.api.registry import get_model

    assert get_model("spotbench") is SpotbenchLM and get_model("dummy").__name__ == "DummyLM"


@pytest.mark.slow  # loads two targets
def test_loglikelihood_exact_for_ar_refused_for_dlm() -> None:
    from lm_eval.api.instance import Instance

    def request(*args: str) -> Instance:
        return Instance("loglikelihood", {}, args, 0)

    dlm = SpotbenchLM(model="tiny-random:sdar", gen_length="16", block_length="8", device="cpu")
    with pytest.raises(ValueError, match="tiny-random:sdar is a diffusion LM, which has no exact likelihood"):
        dlm.loglikelihood([request("2+3=", "5")])
    ar = SpotbenchLM(model="tiny-random-ar", proposer="prompt-lookup", gen_length="16", block_length="8", device="cpu")
    (whole, _), (first, _), (second, _) = ar.loglikelihood(
        [request("ab", "cde"), request("ab", "c"), request("abc", "de")]
    )
    assert whole < 0 and whole == pytest.approx(first + second, abs=1e-5)  # the chain rule (float32 logits)
    tokenizer = ar.target.tokenizer
    for context in ("ab", "a", "b", "cd", "hello", "12"):  # one whose greedy next token is a plain character
        with torch.inference_mode():
            logits = ar.target.model(torch.tensor([tokenizer.encode(context, add_special_tokens=False)])).logits
        greedy = tokenizer.decode([int(logits[0, -1].argmax())])
        if len(greedy) == 1 and tokenizer.encode(greedy, add_special_tokens=False) == [int(logits[0, -1].argmax())]:
            break
    else:
        pytest.fail("no context with a printable greedy next token")
    other = "x" if greedy != "x" else "y"
    assert ar.loglikelihood([request(context, greedy)])[0][1] and not ar.loglikelihood([request(context, other)])[0][1]

"""The `spotbench` model of lm-evaluation-harness: lm-eval's tasks decoded speculatively, every sample
checked against plain decoding.

lm-eval builds a model from `--model NAME` through its registry, which holds its own models and
whatever a loaded module registered with `register_model`; it reads no entry points. Importing this
module registers `spotbench` (after lm-eval's own models, which lm-eval only adds to an empty
registry), so `spotbench lm-eval ARGS` (lm-eval's command line with this module loaded; the way
LLaDA's, Dream's and Fast-dLLM's evaluation scripts load their models) and the Python API
(`lm_eval.simple_evaluate(model="spotbench", ...)` after `import spotbench.lm_eval_model`) both run:

    spotbench lm-eval --model spotbench --model_args model=sdar-a,proposer=spot,budget=8 --tasks gsm8k --limit 8

For each `generate_until` request the prompt is decoded plainly and speculatively with the same seed
(`harness.pipeline.decode_group`, the pipeline behind `spotbench run`), the two are compared token
for token, and the speculative answer, cut at the task's stop strings, is what lm-eval scores. The
verdict and the pass counts of each sample go into its request's generation arguments under
`spotbench`, so `--log_samples` writes them with the sample; totals go into the results' `config`.

`loglikelihood` is exact for autoregressive targets (the sum of the continuation's token
log-probabilities). A masked diffusion LM has no exact likelihood (LLaDA and Dream estimate a Monte
Carlo bound), so for diffusion targets it is refused with one line.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Any

import lm_eval.models  # noqa: F401  lm-eval fills its registry only while empty: its models first
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from harness.errors import UserError

NAME = "spotbench"
SETTINGS = {
    "model": "models",
    "proposer": "proposers",
    "budget": "budgets",
    "rule": "rules",
    "temperature": "temperatures",
    "seed": "seeds",
    "gen_length": "gen_length",
    "block_length": "block_length",
    "untrained_block_length": "untrained_block_length",
    "mask_id": "mask_id",
    "eos_id": "eos_id",
}
"""model_args key -> the suite setting that validates it (as a flag of `spotbench decode` is)."""
EXECUTION = ("exact", "dtype", "device")
"""`device` is lm-eval's `--device` (it passes one to every model, `cuda:0` by default)."""
IGNORED = ("batch_size", "max_batch_size")
"""lm-eval passes these to every model; spotbench decodes one prompt at a time."""
DEFAULTS = {
    "model": "sdar-a",
    "proposer": "confidence",
    "budget": "8",
    "rule": "top1",
    "temperature": "0",
    "seed": "0",
    "gen_length": "64",
}
log = logging.getLogger(__name__)


class ModelArgsError(ValueError):
    """A bad `model_args` key or value: a ValueError where lm-eval builds the model (its error path);
    `spotbench lm-eval` prints it as one line and exits 2."""


@register_model(NAME)
class SpotbenchLM(LM):
    """See the module docstring. model_args: model, proposer, budget, rule, temperature, seed,
    gen_length, block_length, untrained_block_length, mask_id, eos_id (as `spotbench decode` takes
    them), exact, device, dtype."""

    def __init__(self, **model_args: Any):
        super().__init__()
        from cluster.suite import build_suite, check_targets
        from harness.lossless import near_tie_tolerance
        from harness.targets.registry import load_target
        from proposers import arms

        known = [*SETTINGS, *EXECUTION]
        unknown = sorted(set(model_args) - set(known) - set(IGNORED))
        if unknown:
            raise ModelArgsError(f"spotbench model_args: unknown key {unknown[0]!r}; known keys: {', '.join(known)}")
        given = {key: str(value) for key, value in model_args.items() if key in SETTINGS and value is not None}
        settings = DEFAULTS | given
        try:
            names = {SETTINGS[k]: f"model_args {k}" for k in SETTINGS}
            suite = build_suite(
                {}, {SETTINGS[k]: [v] if SETTINGS[k].endswith("s") else v for k, v in settings.items()}, names
            )
            check_targets(suite, names)  # the ids named by their keys, before the weights load
            self.exact = str(model_args.get("exact", False)).lower() in ("true", "1")
            target = load_target(
                settings["model"],
                device=_device(model_args.get("device")),
                dtype=str(model_args.get("dtype") or "auto"),
                mask_id=suite.mask_id,
                eos_id=suite.eos_id,
            )
        except UserError as error:  # lm-eval prints a model's constructor error as it comes
            raise ModelArgsError(f"spotbench model_args: {error}") from None
        if target.tokenizer is None:
            raise ModelArgsError(
                f"spotbench model_args: target {settings['model']!r} has no tokenizer, "
                "and lm-eval tasks give text prompts; use a checkpoint with tokenizer files"
            )
        self.target = target.exact() if self.exact else target
        self.suite = suite
        [self.arm] = arms(suite.proposers, suite.budgets)
        [(self.temperature, self.rule, self.seed)] = suite.groups(settings["model"])
        self.tolerance = near_tie_tolerance(self.target.dtype)
        self.settings = settings
        self.verdicts: Counter[str] = Counter()
        self.totals: Counter[str] = Counter()

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.target.tokenizer, "name_or_path", "") or self.settings["model"]).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.target.tokenizer, "chat_template", None) or ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.target.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        from harness.pipeline import Group, decode_group
        from harness.targets.registry import block_length_trained
        from proposers import build_proposer
        from tasks.base import cut

        answers = []
        for request in requests:
            context, gen_kwargs = request.args
            ids = tuple(self.target.tokenizer.encode(context, add_special_tokens=False))
            group = Group(
                self.settings["model"],
                request.task_name or "lm-eval",
                str(request.doc_id),
                ids,
                self.temperature,
                self.rule,
                self.seed,
                self.suite.gen_length,
                self.suite.block_length_for(self.settings["model"]),
                context,
                block_length_trained=block_length_trained(
                    self.settings["model"], self.suite.block_length_for(self.settings["model"])
                ),
            )
            [row] = decode_group(self.target, group, [self.arm], build_proposer, None, self.exact, self.tolerance)
            until = tuple(s for s in (gen_kwargs or {}).get("until", ()) if s)
            record = {
                "verdict": row.verdict,
                "exact": row.exact,
                "plain_nfe": row.plain_nfe,
                "spec_nfe": row.spec_nfe,
                "speedup_nfe": row.speedup_nfe,
                "mean_accept_len": row.mean_accept_len,
                "divergence_step": row.divergence_step,
            }
            request.arguments = (context, {**(gen_kwargs or {}), NAME: record})  # logged with the sample
            self.verdicts[row.verdict] += 1
            self.totals.update(plain_nfe=row.plain_nfe, spec_nfe=row.spec_nfe, samples=1, exact=int(bool(row.exact)))
            answers.append(cut(row.spec_completion, until))
        log.info("spotbench: %s", self.summary())
        return answers

    def summary(self) -> dict[str, Any]:
        """Totals over every sample so far: the lossless verdicts and the passes each arm took."""
        n = self.totals["samples"]
        return {
            "samples": n,
            "exact": self.totals["exact"],
            "lossless": n > 0 and self.verdicts["logic-error"] == 0,
            "verdicts": dict(self.verdicts),
            "plain_nfe": self.totals["plain_nfe"],
            "spec_nfe": self.totals["spec_nfe"],
            "speedup_nfe": self.totals["plain_nfe"] / self.totals["spec_nfe"] if self.totals["spec_nfe"] else None,
        }

    def get_model_info(self) -> dict[str, Any]:
        return {
            NAME: {
                "settings": self.settings,
                "arm": dataclasses.asdict(self.arm),
                "exact_mode": self.exact,
                **self.summary(),
            }
        }

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return [
            self._continuation_logprob(context, continuation)
            for context, continuation in (request.args for request in requests)
        ]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        return [self._continuation_logprob("", text)[0] for (text,) in (request.args for request in requests)]

    def _continuation_logprob(self, context: str, continuation: str) -> tuple[float, bool]:
        """log p(continuation | context) and whether greedy decoding would produce it (AR targets)."""
        import torch

        from harness.targets.ar import ARTarget

        if not isinstance(self.target, ARTarget):
            raise ValueError(
                f"spotbench: loglikelihood needs an autoregressive target; {self.settings['model']} is "
                "a diffusion LM, which has no exact likelihood (only a Monte Carlo bound); "
                "evaluate it on generate_until tasks such as gsm8k"
            )
        tokenizer = self.target.tokenizer
        prefix = tokenizer.encode(context, add_special_tokens=False) if context else []
        if not prefix:  # a rolling likelihood scores the text from its first token on, after EOS
            prefix = [self.target.eos_id]
        tokens = prefix + tokenizer.encode(continuation, add_special_tokens=False)
        with torch.inference_mode():
            ids = torch.tensor([tokens], device=self.target.device)
            logits = self.target.model(ids).logits[0, len(prefix) - 1 : -1].double()
        wanted = ids[0, len(prefix) :]
        logprobs = logits.log_softmax(-1).gather(-1, wanted[:, None])[:, 0]
        return float(logprobs.sum()), bool((logits.argmax(-1) == wanted).all())


def _device(device: str | None) -> str:
    """lm-eval's `--device`; its default `cuda:0` on a machine without a GPU means the CPU, as
    lm-eval's own Hugging Face model falls back."""
    import torch

    if device is None or (str(device).startswith("cuda") and not torch.cuda.is_available()):
        if device is not None:
            log.warning("spotbench: no CUDA GPU is visible; decoding on the CPU instead of %s", device)
        return "auto"
    return str(device)


def main(argv: list[str]) -> int:
    """lm-eval's command line with the spotbench model registered (`spotbench lm-eval ...`). lm-eval's
    parser reads `sys.argv`, which is set for the call and restored after it."""
    import sys
    from unittest import mock

    from lm_eval.__main__ import cli_evaluate

    with mock.patch.object(sys, "argv", ["lm_eval", *argv]):
        try:
            cli_evaluate()
        except ModelArgsError as error:
            raise UserError(str(error)) from None
    return 0

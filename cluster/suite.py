"""A suite: what a run evaluates (models x tasks x prompts x temperatures x rules x seeds x proposers
x budgets), read from a YAML file and/or command-line flags, and validated before anything starts.

The embedded default (`Suite()`, mirrored by `suites/default.yaml`) is the main job: the zoo target
sdar-a on the offline arith task, the training-free confidence proposer and the best proposer
available (`spot`, the learned proposer trained on sdar-a), greedy and T=1 sampling. Zoo models are trained
zero-shot, so few-shot prompting is off by default.

Each field's type is its validator (harness/validation.py): a flag and the same setting in a suite
file are checked by it alike; `build_suite` adds the checks across fields and resolves every name.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, PlainValidator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

from harness.errors import UserError
from harness.validation import (
    AS_LIST,
    DISTINCT,
    NON_EMPTY,
    Count,
    Counts,
    NonNegativeInt,
    Seeds,
    Switch,
    Temperatures,
    Text,
    Texts,
    accepts_check,
    check_fields,
    check_value,
    construct,
    read_mapping,
    rejected,
)

# Settings that do not change any result: not part of a run's config (a run may resume with others).
EXECUTION_FIELDS = ("workers", "gpus_per_worker")
DEFAULT_BATCH_SIZE = 8
"""Prompts a worker decodes together by default: on the default job (2 CPU cores) the run's wall time
falls with the batch up to about 8 (docs/results/batches-cpu.md); larger batches pad more."""


def _rule(text: str) -> str:
    """A rule every family can run: parsed with each family's confidence convention and range."""
    from harness.decoding import parse_rule
    from harness.decoding.generation import check_rule
    from harness.targets.families import FAMILIES

    try:
        for spec in FAMILIES.values():
            check_rule(parse_rule(text, spec, spec.default_mask_id))
    except UserError as error:
        raise rejected(str(error)) from None
    return text


RuleText = Annotated[str, accepts_check(str, "a rule: top1 or threshold:TAU"), AfterValidator(_rule)]


def _device(text: str) -> str:
    """A device name's form (auto, cpu, cuda, cuda:N); whether a worker has it is checked where it runs."""
    kind, _, index = text.partition(":")
    if text != "auto" and (kind not in ("cpu", "cuda") or (index and (kind != "cuda" or not index.isdigit()))):
        raise rejected(f"device {text!r} is not auto, cpu, cuda or cuda:N")
    return text


def _dtype(text: str) -> str:
    from harness.targets.devices import DTYPES

    if text != "auto" and text not in DTYPES:
        raise rejected(f"dtype {text!r} is not auto, {', '.join(DTYPES)}")
    return text


def _budget(value: Any) -> int | str:
    """A draft budget: a whole number >= 0, or `auto` (each worker chooses by measured latency)."""
    if value == "auto":
        return value
    try:
        return check_value(NonNegativeInt, value, "budget")
    except UserError:
        raise PydanticCustomError("invalid", "must be {what}", {"what": "a whole number >= 0 or auto"}) from None


Budget = Annotated[int | str, PlainValidator(_budget)]
TokenId = Annotated[int | None, accepts_check(int, "a token id (a whole number >= 0)", optional=True, ge=0)]
DeviceText = Annotated[str, accepts_check(str, "a device: auto, cpu, cuda or cuda:N"), AfterValidator(_device)]
DtypeText = Annotated[
    str, accepts_check(str, "a dtype: auto, bfloat16, float16, float32 or float64"), AfterValidator(_dtype)
]


@dataclass(frozen=True)
class Suite:
    models: Texts = ("sdar-a",)
    proposers: Texts = ("confidence", "spot")
    tasks: Texts = ("arith",)
    split: Text = "test"
    limit: Count = 24
    temperatures: Temperatures = (0.0, 1.0)
    """0 (greedy) or in [0.001, 1000] (`harness.validation.Temperature`)."""
    rules: Annotated[tuple[RuleText, ...], AS_LIST, NON_EMPTY, DISTINCT] = ("top1",)
    budgets: Annotated[tuple[Budget, ...], AS_LIST, NON_EMPTY, DISTINCT] = (2, 4, 8)
    """Draft budgets; `auto`: each worker measures its pass cost and the proposers' acceptance on
    train-split prompts and takes the fastest budget (`harness.budget`)."""
    seeds: Seeds = (0,)
    batch_sizes: Counts = (DEFAULT_BATCH_SIZE,)
    """Prompts a worker decodes together (`harness.decoding.batch.decode_batch`), plain references and
    arms alike: each prompt's tokens and passes are its batch-1 ones, its wall time its share of the
    batch's; one group per prompt and batch size, so `[1, 4, 16]` measures throughput by batch size."""
    reference_checks: Count = 1
    """Groups per worker unit whose batched plain reference is decoded again alone and compared
    (`harness.pipeline.references_to_check`); every row records the verdict of its own."""
    gen_length: Count = 64
    block_length: Annotated[int | None, accepts_check(int, "a whole number >= 1", optional=True, ge=1)] = None
    """None: each target's trained block length (`harness.targets.registry.default_block_length`)."""
    untrained_block_length: Switch = False
    """Decode at a block length a target records it was not trained at (a study of one; every row
    says so in `block_length_trained`). Without it such a block length is refused."""
    num_fewshot: Annotated[int | None, accepts_check(int, "a whole number >= 0", optional=True, ge=0)] = 0
    """Few-shot examples for tasks that have them; None keeps each task's own default."""
    mask_id: TokenId = None
    """The mask token id of every diffusion target, overriding its config and tokenizer (`--mask-id`)."""
    eos_id: TokenId = None
    """The end-of-sequence id of every target, overriding its config and tokenizer (`--eos-id`)."""
    chat_template: Annotated[bool | None, accepts_check(bool, "true or false", optional=True)] = None
    """None: prompts go through the tokenizer's chat template when it has one (`tasks.chat`); True: asked
    for, so a target without a template (and token-id prompts) is refused; False: raw text."""
    system_prompt: Annotated[str | None, accepts_check(str, "non-empty text", optional=True, min_length=1)] = None
    """A system turn before the prompt, for targets whose chat template is applied."""
    exact: Switch = False
    """Exactness mode: float64 targets, rows evaluated one by one (any divergence is then a bug)."""
    passes_only: Switch = False
    """Replay every arm's passes from one plain decode per prompt, decoding only a sample for real
    (`harness.passes_only`): pass tables a CPU affords; wall figures come from the sample alone."""
    replay_check: Count = 4
    """Passes-only runs: prompts per worker unit decoded for real, checking the replayed counts."""
    ar_sampling: Annotated[str, accepts_check(str, "coupled or rejection", pattern="^(coupled|rejection)$")] = "coupled"
    """How AR arms sample: `coupled` (the target's noise shared, token-exact) or `rejection`
    (Leviathan/Chen rejection sampling, lossless in distribution; `harness.decoding.ar_rejection`)."""
    device: DeviceText = "auto"
    """Where each worker decodes: auto (its GPU when it has one, else its CPU), cpu, cuda or cuda:N."""
    dtype: DtypeText = "auto"
    """Target weights: auto (bf16 on a GPU, float32 on a CPU) or a dtype name; exactness mode uses float64."""
    workers: Annotated[int | None, accepts_check(int, "a whole number >= 1", optional=True, ge=1)] = None
    """Ray workers; None = as many as the cluster's GPUs hold (`gpus_per_worker` each), or one per CPU
    core of the cluster when it has no GPU or the device is cpu."""
    gpus_per_worker: Annotated[
        float, accepts_check(float, "a number of GPUs > 0 (fractions share a GPU)", gt=0, allow_inf_nan=False)
    ] = 1.0
    """GPUs each worker reserves on a GPU cluster; 0.5 puts two workers on one GPU."""

    def config(self) -> dict[str, Any]:
        """The settings that define the results (JSON-ready; stored in the run's manifest)."""
        data = dataclasses.asdict(self)
        for name in EXECUTION_FIELDS:
            data.pop(name)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def block_length_for(self, model: str) -> int:
        """The block length `model` decodes at: the one asked for, else the one it was trained at."""
        from harness.targets.registry import default_block_length

        return self.block_length if self.block_length is not None else default_block_length(model)

    def groups(self, model: str | None = None) -> list[tuple[float, str, int]]:
        """(temperature, rule, seed): each has one plain reference per prompt. The rules are DLM
        commit rules: an autoregressive `model` has the one rule `greedy` instead (docs/autoregressive.md)."""
        from harness.decoding.autoregressive import AR_RULE
        from harness.targets.ar import is_ar_name

        rules = (AR_RULE,) if model is not None and is_ar_name(model) else self.rules
        return [(t, r, s) for t in self.temperatures for r in rules for s in self.seeds]


FLAGS = {name: "--" + name.replace("_", "-") for name in Suite.__dataclass_fields__} | {
    "num_fewshot": "--fewshot",
    "batch_sizes": "--batch-size",
}
"""`spotbench run`'s flag for each setting (other commands pass their own names to `build_suite`)."""


def load_suite(path: str | Path) -> dict[str, Any]:
    """The settings of a YAML suite file (a mapping of Suite fields), each checked by its field."""
    return check_fields(Suite, read_mapping(path, "suite"), lambda name: f"suite {path}: {name}")


def build_suite(
    file_settings: dict[str, Any], flags: Mapping[str, Any], flag_names: Mapping[str, str] = FLAGS
) -> Suite:
    """Defaults < suite file < command-line flags (None = not given); `flag_names` names the flags
    in messages. Every field, the checks across fields and every name, before anything starts."""
    given = {name: value for name, value in flags.items() if value is not None}
    settings = file_settings | check_fields(Suite, given, lambda name: flag_names.get(name, name))
    suite = construct(Suite, settings, "suite")
    resolve(suite)
    return suite


def resolve(suite: Suite) -> None:
    """Every model, proposer and task (with its split) names something that exists."""
    from harness.passes_only import check_passes_only
    from harness.targets.ar import check_ar_name, is_ar_name
    from harness.targets.converted import check_converted, is_converted
    from harness.targets.registry import check_block_length_for, check_lengths_for
    from harness.targets.tiny import parse_tiny_name
    from harness.targets.zoo import model_folder, zoo_names
    from proposers import check_arm_for_model, check_proposer, check_sampling
    from tasks.chat import check_token_id_prompts
    from tasks.prompt_ids import PREFIX as IDS_PREFIX
    from tasks.registry import get_task

    for model in suite.models:
        if is_ar_name(model):
            check_ar_name(model)
            continue
        if model.startswith("tiny-random"):
            parse_tiny_name(model)
        elif is_converted(model_folder(model)):
            check_converted(model_folder(model))
        elif model not in zoo_names():
            check_checkpoint_folder(model)
        check_block_length_for(model, suite.block_length_for(model), suite.untrained_block_length)
        check_lengths_for(model, suite.gen_length, suite.block_length_for(model))
    for proposer in suite.proposers:
        check_proposer(proposer)
        for model in suite.models:  # fitted to one model, block length (a Spiffy graph) or rule (SPOT-Sets)
            check_arm_for_model(proposer, model, suite.block_length_for(model), suite.rules)
            check_sampling(proposer, model, suite.ar_sampling)
    for name in suite.tasks:
        task = get_task(name)
        if suite.split not in task.splits:
            raise UserError(f"task {name!r} has no split {suite.split!r}; splits: {', '.join(task.splits)}")
        if "auto" in suite.budgets and "train" not in task.splits:
            raise UserError(
                f"budgets auto chooses on train-split prompts and task {name!r} has none; give it fixed budgets"
            )
    for name in suite.tasks:
        if name.startswith(IDS_PREFIX):
            get_task(name).load()  # a missing or malformed file fails here, before a run directory exists
            check_token_id_prompts(suite.chat_template, suite.system_prompt, f"task {name}")
    if suite.passes_only:
        check_passes_only(suite.models)
    for model in suite.models:
        if "auto" in suite.budgets and is_ar_name(model):
            raise UserError(f"budgets auto is for diffusion targets; give {model} fixed budgets")


def check_targets(suite: Suite, flag_names: Mapping[str, str] = FLAGS, local: bool = True) -> None:
    """What can be checked of each target without its weights, before Ray starts or anything is written
    (a worker would find it only after the cluster started, and the run directory would keep the bad
    setting): its config and tokenizer files, the mask and eos ids against its vocabulary (read from
    the config), token-id prompts against the vocabulary, the chat settings against the tokenizer and,
    for a `local` run, the largest batch size against a worker's memory (`check_batch_memory`).
    `flag_names` names the settings in messages."""
    from harness.targets.ar import TINY_AR, folder_of, is_ar_name
    from harness.targets.checkpoint import CONFIG, check_token_id, read_head
    from harness.targets.converted import is_converted
    from harness.targets.registry import load_dlm_target, load_target
    from harness.targets.target import DLMTarget
    from harness.targets.zoo import model_folder
    from tasks.chat import Chat
    from tasks.prompt_ids import PREFIX
    from tasks.registry import get_task

    flag = {name: flag_names.get(name, FLAGS[name]) for name in ("mask_id", "eos_id")}
    text_tasks = [name for name in suite.tasks if not name.startswith(PREFIX)]
    id_prompts = {
        name: [s.meta["prompt_ids"] for s in get_task(name).load(suite.split, limit=suite.limit)]
        for name in suite.tasks
        if name.startswith(PREFIX)
    }
    for model in suite.models:
        tokenizer, vocab_size = None, None
        tiny: DLMTarget | None = None
        if is_ar_name(model):
            if suite.mask_id is not None:
                raise UserError(
                    f"{flag['mask_id']} is for diffusion targets; {model} is autoregressive and has no "
                    "mask token: drop it"
                )
            if model.startswith(TINY_AR):
                target = load_target(model)  # built in code, tiny
                tokenizer, vocab_size = target.tokenizer, target.vocab_size
            elif (folder_of(model) / CONFIG).is_file():  # a GGUF file's vocabulary is checked where it loads
                vocab_size = json.loads((folder_of(model) / CONFIG).read_text(encoding="utf-8")).get("vocab_size")
        elif model.startswith("tiny-random"):
            tiny = load_dlm_target(model)  # built in code, tiny
            tokenizer, vocab_size = tiny.tokenizer, tiny.vocab_size
        elif is_converted(model_folder(model)):
            continue  # its base's vocabulary and tokenizer are checked where the base loads
        else:
            fmt, config, tokenizer, _, _ = read_head(model_folder(model), suite.mask_id, suite.eos_id, flag)
            vocab_size = config.vocab_size
        if not isinstance(vocab_size, int):
            continue
        for name, value in (("mask_id", suite.mask_id), ("eos_id", suite.eos_id)):
            if value is not None:
                check_token_id(value, vocab_size, name.replace("_", " "), flag[name])
        for task, prompts in id_prompts.items():
            for number, ids in enumerate(prompts, 1):
                outside = [i for i in ids if i >= vocab_size]
                if outside:
                    raise UserError(
                        f"task {task}: prompt {number} has token id {outside[0]}, outside the vocabulary "
                        f"of {model} (0..{vocab_size - 1}); give ids below {vocab_size}"
                    )
        if text_tasks and tokenizer is not None:
            Chat(tokenizer, suite.chat_template, suite.system_prompt).check(model)
        if local and not is_ar_name(model):
            cfg, family = (tiny.model.cfg, tiny.family.name) if tiny is not None else (config, fmt.family)
            check_batch_memory(suite, model, cfg, family, tokenizer, id_prompts, flag_names)


def check_batch_memory(
    suite: Suite,
    model: str,
    cfg: Any,
    family_name: str,
    tokenizer: Any,
    id_prompts: dict[str, list[list[int]]],
    flag_names: Mapping[str, str] = FLAGS,
) -> None:
    """The largest batch size against the memory a local worker has free (GPU memory of its share of
    a GPU, else the machine's available memory shared by the workers), estimated from the target's
    config, the longest prompt and the largest budget (`harness.targets.devices.batch_memory`)."""
    import os

    import torch

    from harness.targets.devices import available_memory, batch_memory, check_batch_fits, resolve_device, resolve_dtype
    from harness.targets.families import family
    from tasks.base import prompt_ids
    from tasks.chat import Chat
    from tasks.prompt_ids import PREFIX
    from tasks.registry import get_task

    lengths = [len(ids) for prompts in id_prompts.values() for ids in prompts]
    if tokenizer is not None:
        chat = Chat(tokenizer, suite.chat_template, suite.system_prompt)
        for name in (n for n in suite.tasks if not n.startswith(PREFIX)):
            task = get_task(name, suite.num_fewshot)
            lengths += [len(prompt_ids(task, s, chat)) for s in task.load(suite.split, limit=suite.limit)]
    device = resolve_device(suite.device)
    dtype = torch.float64 if suite.exact else resolve_dtype(suite.dtype, device)
    budget = max(16 if b == "auto" else int(b) for b in suite.budgets)
    batch = max(suite.batch_sizes)
    needed = batch_memory(
        cfg,
        family(family_name).attention != "block_causal",
        batch,
        budget + 1,
        max(lengths, default=0),
        suite.gen_length,
        suite.block_length_for(model),
        dtype,
    )
    if device.type == "cuda":
        free = int(torch.cuda.mem_get_info(device)[0] * min(1.0, suite.gpus_per_worker))
    else:
        free = available_memory() // (suite.workers or os.cpu_count() or 1)
    check_batch_fits(needed, free, f"{flag_names.get('batch_sizes', '--batch-size')} {batch} on {model}")


def check_prompts_fit(suite: Suite) -> None:
    """A run's text tasks need a tokenizer: a checkpoint folder without tokenizer files takes only
    token-id prompts (`ids:FILE.jsonl`), refused before a run directory exists."""
    from harness.targets.ar import is_ar_name
    from harness.targets.checkpoint import TOKENIZER_FILES
    from harness.targets.converted import is_converted
    from harness.targets.zoo import model_folder
    from tasks.prompt_ids import PREFIX

    text_tasks = [name for name in suite.tasks if not name.startswith(PREFIX)]
    for model in suite.models:
        folder = model_folder(model)
        bare = (
            folder.is_dir()
            and not is_converted(folder)  # a converted target uses its base's tokenizer
            and not any((folder / f).is_file() for f in TOKENIZER_FILES)
        )
        if text_tasks and bare and not is_ar_name(model):  # a GGUF file carries its own tokenizer
            raise UserError(
                f"model {model} has no tokenizer files and task {text_tasks[0]} gives text prompts; "
                "give token-id prompts (--tasks ids:FILE.jsonl) or a folder with its tokenizer"
            )


def check_storable(suite: Suite) -> None:
    """Every seed fits the seed column of the rows a run stores (`harness.runs.schema.ROW_SCHEMA`), checked
    before a run directory exists: the noise takes any seed in [0, 2**64), a signed column half of them."""
    import pyarrow as pa

    from harness.runs.schema import ROW_SCHEMA

    column = ROW_SCHEMA.field("seed").type
    bits = column.bit_width - (0 if pa.types.is_unsigned_integer(column) else 1)
    for seed in suite.seeds:
        if seed >= 2**bits:
            raise UserError(
                f"seed {seed} does not fit the {column} seed column of run results; "
                f"use seeds below 2**{bits} (decode takes any seed in [0, 2**64))"
            )


def check_checkpoint_folder(model: str) -> None:
    """A model path is a checkpoint folder of a known family, checked from its config alone (the
    weights load on the workers): a folder that is not one must fail before a run directory exists."""
    from harness.targets.checkpoint import CONFIG, INDEX, SINGLE
    from harness.targets.formats import detect_format
    from harness.targets.zoo import model_folder, zoo_names

    folder = model_folder(model)
    if not folder.is_dir():
        zoo = ", ".join(zoo_names()) or "none built"
        raise UserError(
            f"unknown model {model!r}; use a zoo model ({zoo}), tiny-random:<family>[:seed] or a checkpoint folder"
        )
    usage = "give a checkpoint folder (config.json and model.safetensors), a zoo model or tiny-random:<family>"
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"model {model} is a folder but not a checkpoint (no {CONFIG}); {usage}") from None
    except (OSError, ValueError) as error:
        raise UserError(f"model {model}: {CONFIG} is not readable JSON ({error}); {usage}") from None
    if not isinstance(config, dict):
        raise UserError(f"model {model}: {CONFIG} is not a JSON object; {usage}")
    detect_format(config, folder / CONFIG)
    if not ((folder / SINGLE).is_file() or (folder / INDEX).is_file()):
        raise UserError(f"model {model} has no {SINGLE} or {INDEX}; {usage}")

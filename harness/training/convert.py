"""Convert an autoregressive LM into a block-diffusion target: train its gated adapter from a recipe.

The objective is SDAR's masked-block diffusion on the absolute block grid
(`harness.training.masked_blocks`, which lays out a batch's two passes and weighs the loss): only the
adapter enters autograd, and the output head runs only at masked rows. Every sequence ends with EOS,
padded with EOS to the end of its block, as decoding fills a block after the answer ends. A recipe
whose blocks, sequences or attention masks do not fit the base or the machine is refused before the
base loads (`check_layout`, with the base's context from `harness.targets.base_context`).

The run folder holds `train_state.pt` (adapter, optimiser, generators, step, learning curve), saved
every `checkpoint_every` steps by temp file + rename (in parts of at most 16 MiB beside it, so a zoo
folder can commit an unfinished run), so an interrupted conversion resumes bit-identically; `model/`
is the converted target (rewritten at each validation), which `load_target` reads like any other
diffusion target. A finished conversion removes its state and keeps `model/` alone; run again, it
finds the recipe's steps done in `model/training.json` and trains nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from harness.errors import UserError
from harness.recipes import load_recipe
from harness.targets import adapter
from harness.targets.converted import convert, is_converted, read_meta, save_converted
from harness.targets.devices import available_memory
from harness.targets.target import DLMTarget
from harness.training.loop import TrainingRun, precision, remove_state, same_recipe
from harness.training.masked_blocks import Sequence, diffusion_loss, layout
from harness.validation import Count, NonNegative, NonNegativeInt, Positive, Text

STATE_FILE = "train_state.pt"
MODEL_DIR = "model"


@dataclass(frozen=True)
class ConvertRecipe:
    """Field types are the recipe's schema (harness/validation.py), checked by `load_recipe`."""

    name: Text
    tasks: list[Text]
    base: Text = "smollm2"
    mask_id: NonNegativeInt = 16
    block_length: Count = 4
    rank: Count = 8
    alpha: Positive = 16.0
    seed: NonNegativeInt = 0
    steps: Count = 1000
    batch_size: Count = 8
    learning_rate: Positive = 1e-3
    warmup_steps: NonNegativeInt = 20
    weight_decay: NonNegative = 0.0
    grad_clip: Positive = 1.0
    prompt_max_tokens: Count = 256
    answer_max_tokens: Count = 256
    train_examples: NonNegativeInt = 0
    """At most this many training sequences after the held-out ones (0: the whole train splits)."""
    validation_examples: Count = 32
    validation_every: Count = 50
    checkpoint_every: Count = 10
    dtype: Literal["float32", "bfloat16"] = "float32"
    """`bfloat16`: the frozen base in bfloat16 and the step under CPU/GPU autocast (the adapter and
    its optimizer stay float32); on CPUs with AVX512-BF16 a step is several times faster."""
    init_adapter: str = ""
    """A converted target (zoo name or folder) of the same base and rank whose adapter starts this
    conversion instead of zeros: a wider block length learns from a narrower one's adapter, which
    already reads the mask token and attends bidirectionally inside a block. Empty: from zeros."""

    @staticmethod
    def load(path: str | Path, steps: int | None = None) -> ConvertRecipe:
        recipe = load_recipe(ConvertRecipe, path, {"steps": steps})
        recipe.check(f"recipe {path}")
        return recipe

    @property
    def samples_per_task(self) -> int | None:
        """The train-split samples of each task a conversion reads (`tasks.registry.train_answers`):
        enough for the held-out share and `train_examples` (None: all)."""
        return self.validation_examples + self.train_examples if self.train_examples else None

    def check(self, where: str) -> None:
        """What the schema cannot say: a block of one position is autoregressive decoding (its only
        token is predicted by the clean row before it), so there is nothing to train."""
        if self.block_length < 2:
            raise UserError(
                f"{where}: block_length {self.block_length} leaves the adapter nothing to learn (the "
                "block's one token is the base's next-token prediction); use 2 or more"
            )
        if self.init_adapter:
            init_folder(self)


def held_out_first(per_task: list[list[tuple[list[int], list[int]]]], validation_examples: int) -> list:
    """Every task's (prompt ids, answer ids) pairs in one list whose first `validation_examples` are an
    equal share of each task's first pairs: the held-out loss covers every task."""
    held = validation_examples // len(per_task)
    return [p for task in per_task for p in task[:held]] + [p for task in per_task for p in task[held:]]


def sequences(pairs: list[tuple[list[int], list[int]]], recipe: ConvertRecipe, eos_id: int) -> list[Sequence]:
    """Prompt (its last `prompt_max_tokens`) + answer (its first `answer_max_tokens`) + EOS, padded
    with EOS to the end of the block on the absolute grid."""
    out = []
    size = recipe.block_length
    for prompt, answer in pairs:
        prompt = prompt[-recipe.prompt_max_tokens :]
        tokens = prompt + answer[: recipe.answer_max_tokens] + [eos_id]
        tokens += [eos_id] * (-len(tokens) % size)
        out.append(Sequence(tokens, len(prompt)))
    return out


@torch.no_grad()
def heldout_loss(target: DLMTarget, examples: list[Sequence], recipe: ConvertRecipe) -> float:
    """The loss on held-out training-split sequences under fixed noise, so runs compare."""
    noise = torch.Generator().manual_seed(12345)
    total = 0.0
    for start in range(0, len(examples), recipe.batch_size):
        chunk = examples[start : start + recipe.batch_size]
        total += diffusion_loss(target, layout(chunk, recipe.block_length, recipe.mask_id, noise)).item() * len(chunk)
    return total / max(1, len(examples))


def init_folder(recipe: ConvertRecipe) -> Path:
    """The converted folder `init_adapter` names: a zoo target's model folder, else a path."""
    from harness.targets.zoo import model_dir

    zoo = model_dir(recipe.init_adapter)
    folder = zoo if is_converted(zoo) else Path(recipe.init_adapter)
    if not is_converted(folder):
        raise UserError(
            f"recipe {recipe.name}: init_adapter {recipe.init_adapter!r} is not a converted target "
            "(a zoo name or a folder that spotbench convert wrote)"
        )
    return folder


def start_from_adapter(target: DLMTarget, recipe: ConvertRecipe, base_hash: str) -> None:
    """Load `init_adapter`'s matrices into a fresh conversion; its base and rank must be this one's."""
    from safetensors.torch import load_file

    from harness.targets.converted import ADAPTER_FILE, read_meta

    folder = init_folder(recipe)
    meta = read_meta(folder)
    if meta["base_hash"] != base_hash or meta["rank"] != recipe.rank or meta["alpha"] != recipe.alpha:
        raise UserError(
            f"recipe {recipe.name}: init_adapter {folder} was trained on base {meta['base_hash']} at rank "
            f"{meta['rank']}, alpha {meta['alpha']}; this conversion is base {base_hash}, rank {recipe.rank}, "
            f"alpha {recipe.alpha}"
        )
    if not adapter.load_lora(target.model, load_file(str(folder / ADAPTER_FILE))):
        raise UserError(f"recipe {recipe.name}: {folder / ADAPTER_FILE} does not fit rank {recipe.rank}")


def check_out_dir(out_dir: Path) -> None:
    """A conversion writes only into a folder of its own: an --out that holds something else (a zoo
    model, another checkpoint) would have its model/ replaced, so it is refused; and one it could not
    create or write is refused before the base loads."""
    check_writable(out_dir)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UserError(f"--out {out_dir} is a file; give a folder for the conversion")
    ours = {STATE_FILE, MODEL_DIR, MODEL_DIR + ".tmp"}
    foreign = sorted(
        p.name for p in out_dir.iterdir() if p.name not in ours and not p.name.startswith(STATE_FILE + ".")
    )
    model = out_dir / MODEL_DIR
    if foreign or (model.exists() and not is_converted(model)):
        what = foreign[0] if foreign else f"{MODEL_DIR}/ that is not a converted target"
        raise UserError(f"--out {out_dir} holds {what}, not a conversion run; give a new folder")


def check_writable(out_dir: Path) -> None:
    """UserError (one line) if `out_dir` could not be created or written: its nearest existing folder
    must let this user write (`os.access`) and take a probe file (created and removed), which also
    catches what permission bits do not say, such as root under /proc or a read-only file system."""
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == out_dir:
            return  # a file at --out itself: check_out_dir names it
        raise UserError(f"--out {out_dir}: {existing} is a file, not a folder; give a folder for the conversion")
    try:
        if not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(13, "permission denied")
        descriptor, probe = tempfile.mkstemp(prefix=".spotbench-probe-", dir=existing)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        raise UserError(
            f"--out {out_dir}: cannot write in {existing} ({error.strerror or error}); give a folder you can write"
        ) from None


def layout_bytes(recipe: ConvertRecipe) -> tuple[int, int]:
    """(the longest sequence a recipe makes, in positions; the bytes of one batch's attention masks).

    A sequence is at most prompt_max_tokens + answer_max_tokens + EOS, padded to the block grid. Its
    clean context C is the sequence less its last block, its noisy span L runs from the block holding
    the prompt's end, at most a block more than the answer's blocks; `layout` holds the clean mask
    [batch, 1, C, C] and the noisy one [batch, 1, L, C + L] (bool), and builds a [C, C] causal mask
    and an [L, L] block mask beside them."""
    size = recipe.block_length
    longest = -(-(recipe.prompt_max_tokens + recipe.answer_max_tokens + 1) // size) * size
    clean = max(longest - size, 1)
    noisy = min(longest, size + -(-recipe.answer_max_tokens // size) * size)
    return longest, recipe.batch_size * (clean * clean + noisy * (clean + noisy)) + clean * clean + noisy * noisy


def check_layout(recipe: ConvertRecipe, context: int | None, where: str) -> None:
    """Refuse (one line), before anything is allocated, a recipe whose blocks or sequences are longer
    than the base's context (`context` positions; None: not known), or whose batch's attention masks
    alone would not fit in the memory this machine has available."""
    longest, needed = layout_bytes(recipe)
    size = recipe.block_length
    if context is not None and size > context:
        raise UserError(
            f"{where}: block_length {size} is longer than base {recipe.base}'s context ({context} positions, "
            "max_position_embeddings); use a block length that fits"
        )
    if context is not None and longest > context:
        raise UserError(
            f"{where}: prompt_max_tokens {recipe.prompt_max_tokens} + answer_max_tokens "
            f"{recipe.answer_max_tokens} + EOS make sequences of up to {longest} positions at block_length "
            f"{size}, longer than base {recipe.base}'s context ({context} positions); lower them"
        )
    available = available_memory()
    if needed > available:
        raise UserError(
            f"{where}: a batch of {recipe.batch_size} sequences of up to {longest} positions at block_length "
            f"{size} needs {needed / 2**30:.2f} GiB for its attention masks alone, and this machine has "
            f"{available / 2**30:.2f} GiB available; lower block_length, batch_size or the prompt and answer "
            "token limits"
        )


def train_conversion(
    recipe: ConvertRecipe,
    base,
    pairs: list[tuple[list[int], list[int]]],
    out_dir: Path,
    stop_after_s: float | None = None,
) -> dict:
    """Train (or resume) into `out_dir` on (prompt ids, answer ids) pairs of train splits; stop after
    `stop_after_s` seconds at a checkpoint (a later call resumes). Returns the training report."""
    recipe.check(f"recipe {recipe.name}")
    check_out_dir(out_dir)
    config = getattr(base.model, "config", None)
    check_layout(recipe, getattr(config, "max_position_embeddings", None), f"recipe {recipe.name}")
    data = sequences(pairs, recipe, base.eos_id)
    validation, training = data[: recipe.validation_examples], data[recipe.validation_examples :]
    if recipe.train_examples:
        training = training[: recipe.train_examples]
    if len(training) < recipe.batch_size:
        raise UserError(
            f"recipe {recipe.name}: only {len(training)} training sequences for batch size {recipe.batch_size}"
        )
    torch.manual_seed(recipe.seed)
    target = convert(base, recipe.mask_id, recipe.rank, recipe.alpha, name=recipe.name)
    autocast = precision(
        target.model, recipe.dtype, target.device
    )  # the base only: the adapter and its optimizer stay float32
    run = TrainingRun(
        recipe,
        adapter.lora_state(target.model).values(),
        len(training),
        out_dir / STATE_FILE,
        "use a new --out folder, or the recipe that run started with",
    )
    tokens_seen, seconds, curve = 0, 0.0, []
    base_hash = adapter.weights_hash(base.model)
    if run.saved is None:
        done = finished_report(out_dir, recipe, base_hash)
        if done is not None:
            return done
    if run.saved is not None:
        state = run.saved
        if state["base_hash"] != base_hash:
            raise UserError(
                f"{out_dir} holds a conversion of other base weights (hash {state['base_hash']}, "
                f"these are {base_hash}); use a new --out folder"
            )
        adapter.load_lora(target.model, state["adapter"])
        tokens_seen, seconds, curve = state["tokens_seen"], state["seconds"], state["curve"]
    elif recipe.init_adapter:
        start_from_adapter(target, recipe, base_hash)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "base": recipe.base,
        "base_hash": base_hash,
        "rank": recipe.rank,
        "alpha": recipe.alpha,
        "block_length": recipe.block_length,
        "recipe": dataclasses.asdict(recipe),
    }
    started, window = time.perf_counter(), []
    target.model.train()
    while not run.done:
        chosen = run.batch(training)
        tick = time.perf_counter()
        with autocast:
            loss = diffusion_loss(target, layout(chosen, recipe.block_length, recipe.mask_id, run.noise))
        run.optimize(loss)
        seconds += time.perf_counter() - tick
        step = run.step
        tokens_seen += sum(len(s.tokens) for s in chosen)
        window.append(loss.item())
        print(f"step {step}/{recipe.steps} loss {window[-1]:.4f} ({time.perf_counter() - tick:.1f} s)", flush=True)
        if step % recipe.validation_every == 0 or step == recipe.steps:
            target.model.eval()
            with autocast:
                heldout = heldout_loss(target, validation, recipe)
            curve.append(
                {
                    "step": step,
                    "train_loss": sum(window) / len(window),
                    "heldout_loss": heldout,
                    "seconds": round(seconds, 1),
                    "tokens_seen": tokens_seen,
                }
            )
            target.model.train()
            window = []
            report = _report(recipe, target, step, tokens_seen, seconds, curve)
            save_converted(target, out_dir / MODEL_DIR, meta, report)
        if run.checkpoint_due():
            run.save(
                {
                    "base_hash": base_hash,
                    "adapter": {k: v.detach().clone() for k, v in adapter.lora_state(target.model).items()},
                },
                tokens_seen=tokens_seen,
                seconds=seconds,
                curve=curve,
            )
            if stop_after_s is not None and time.perf_counter() - started > stop_after_s:
                break
    target.model.eval()
    if run.done:  # a finished run resumes nothing: model/ is what it leaves
        remove_state(out_dir / STATE_FILE)
    return _report(recipe, target, run.step, tokens_seen, seconds, curve)


def finished_report(out_dir: Path, recipe: ConvertRecipe, base_hash: str) -> dict | None:
    """The training report of the finished conversion in `out_dir/model` (its state removed), or None
    when there is none. One of another recipe or other base weights is refused (one line): without its
    state it cannot be resumed, and training again would replace it."""
    model = out_dir / MODEL_DIR
    try:
        report = json.loads((model / "training.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("finished") is not True:
        return None
    meta = read_meta(model)
    if not isinstance(meta.get("recipe"), dict) or not same_recipe(meta["recipe"], recipe):
        raise UserError(f"{out_dir} holds a finished conversion of a different recipe; use a new --out folder")
    if meta["base_hash"] != base_hash:
        raise UserError(
            f"{out_dir} holds a conversion of other base weights (hash {meta['base_hash']}, these are "
            f"{base_hash}); use a new --out folder"
        )
    return report


def _report(
    recipe: ConvertRecipe, target: DLMTarget, step: int, tokens_seen: int, seconds: float, curve: list[dict]
) -> dict:
    parameters = sum(p.numel() for p in target.model.parameters())
    return {
        "name": recipe.name,
        "family": "converted",
        "base": recipe.base,
        "steps": step,
        "finished": step >= recipe.steps,
        "parameters": parameters,
        "training_tokens": tokens_seen,
        "train_seconds": round(seconds, 1),
        "heldout_loss": curve[-1]["heldout_loss"] if curve else None,
        "curve": curve,
    }

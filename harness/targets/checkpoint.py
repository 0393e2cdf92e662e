"""Load and save local Hugging Face checkpoint folders of the four target families.

A folder holds `config.json`, the weights as `model.safetensors` or as shards listed in
`model.safetensors.index.json`, and usually tokenizer files (without them the target decodes token
ids: `tokenizer` is None). The family is detected from the config
(formats/), config keys become a `ModelConfig`, and published tensor names are mapped onto
`DLMTransformer` names. Nothing from the folder is executed: the published remote code
(`auto_map`) is neither needed nor run, and the tokenizer is loaded without `trust_remote_code`.

Anything spotbench cannot evaluate faithfully (an unknown family, a config option the forward
pass does not implement, a missing shard or tensor, an unexpected tensor, a shape that disagrees
with the config) is a `UserError` naming the file, never a silent partial load.

`save_checkpoint` writes the same layout, so the project can publish its own tiny models in a
family's format and tests can build checkpoints; it refuses a model the format cannot express.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from harness.errors import UserError
from harness.targets.devices import check_fits
from harness.targets.families import family as family_spec
from harness.targets.formats import FORMATS, CheckpointFormat, ConfigReader, TensorMap, detect_format
from harness.targets.model import DLMTransformer, ModelConfig
from harness.targets.target import DLMTarget

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")
"""Any of these means the folder ships a tokenizer, which must then load; none means it has none."""
"""Non-persistent buffers that some older exports still contain; they carry no weights."""


def load_checkpoint(
    folder: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    mask_id: int | None = None,
    eos_id: int | None = None,
) -> DLMTarget:
    """Read a checkpoint folder into a `DLMTarget` with weights in `dtype` on `device`. The model is
    built on the meta device and every tensor is read from its shard straight onto `device`, so an 8B
    checkpoint never needs a second full copy in host memory. `mask_id` / `eos_id` (the `--mask-id` /
    `--eos-id` flags) override what the folder says, for configs and tokenizers that name none."""
    folder = Path(folder)
    fmt, cfg, tokenizer, mask_id, eos_id = read_head(folder, mask_id, eos_id)
    with torch.device("meta"):
        model = DLMTransformer(cfg)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    check_fits(sum(math.prod(shape) for shape in shapes.values()), dtype, torch.device(device), str(folder))
    state = _read_weights(folder, fmt.tensor_map(cfg), shapes, dtype, cfg.tie_embeddings, torch.device(device))
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if cfg.tie_embeddings:  # assign=True replaced the shared parameter on one side only
        model.lm_head.weight = model.embed_tokens.weight
    return DLMTarget(model, family_spec(fmt.family), mask_id, eos_id, tokenizer, name=str(folder))


def read_head(
    folder: Path, mask_id: int | None = None, eos_id: int | None = None, flags: dict[str, str] | None = None
) -> tuple[CheckpointFormat, ModelConfig, Any, int, int]:
    """Everything of a checkpoint folder but its weights, checked: format, config, tokenizer (None
    without tokenizer files), mask and eos ids (the overrides, checked against the vocabulary). What a
    run checks before any worker loads the weights; `flags` names the overrides in messages
    (default `--mask-id` / `--eos-id`)."""
    raw = _read_json(folder / CONFIG, what="not a checkpoint folder")
    fmt = detect_format(raw, folder / CONFIG)
    cfg = fmt.read_config(ConfigReader(raw, folder / CONFIG))
    _check_geometry(cfg, folder / CONFIG)
    tokenizer = _load_tokenizer(folder, fmt.family)
    mask_id, eos_id = _token_ids(raw, tokenizer, fmt, cfg, folder / CONFIG, mask_id, eos_id, flags or {})
    return fmt, cfg, tokenizer, mask_id, eos_id


def save_checkpoint(
    target: DLMTarget,
    folder: str | Path,
    family: str | None = None,
    max_shard_bytes: int | None = None,
) -> None:
    """Write `target` as a `family` checkpoint (default: the target's own family) into a new or
    empty folder; with `max_shard_bytes`, as shards plus an index, the layout large models use."""
    folder = Path(folder)
    fmt = FORMATS.get(family or target.family.name)
    if fmt is None:
        raise UserError(f"unknown checkpoint family {family!r}; choose one of: {', '.join(FORMATS)}")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UserError(f"{folder}: refusing to write a checkpoint into a non-empty path")
    if target.tokenizer is None:
        raise UserError("cannot save a checkpoint without a tokenizer")
    cfg = target.model.cfg
    raw = fmt.write_config(cfg) | {
        "mask_token_id": target.mask_id,
        "eos_token_id": target.eos_id,
        "torch_dtype": str(target.dtype).removeprefix("torch."),
    }
    _check_round_trip(fmt, cfg, raw, folder / CONFIG)
    state = target.model.state_dict()
    tensors = {
        published: torch.cat([state[name] for name in ours]).detach()  # cat copies: no shared storage
        for published, ours in fmt.tensor_map(cfg).items()
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG).write_text(json.dumps(raw, indent=2) + "\n")
    _write_weights(folder, tensors, max_shard_bytes)
    target.tokenizer.save_pretrained(str(folder))


def _check_round_trip(fmt: CheckpointFormat, cfg: ModelConfig, raw: dict, path: Path) -> None:
    """The written config must read back as the same architecture, else the format cannot
    express the model (e.g. a qk-norm model as LLaDA) and saving would publish a different one."""
    back = fmt.read_config(ConfigReader(raw, path))
    differ = [f.name for f in dataclasses.fields(cfg) if f.compare and getattr(cfg, f.name) != getattr(back, f.name)]
    if differ:
        raise UserError(
            f"the {fmt.family} checkpoint format cannot express this model (it would change: {', '.join(differ)})"
        )


def _check_geometry(cfg: ModelConfig, path: Path) -> None:
    """Sizes the forward pass needs to be consistent, refused here rather than failing mid-pass."""
    rotary = int(cfg.head_dim * cfg.partial_rotary_factor)
    problems = [
        (
            cfg.num_kv_heads == 0 or cfg.num_heads % cfg.num_kv_heads != 0,
            f"{cfg.num_heads} attention heads do not split into {cfg.num_kv_heads} key/value heads",
        ),
        (
            rotary <= 0 or rotary % 2 != 0 or rotary > cfg.head_dim,
            f"rotary dimension {rotary} must be even and within head_dim {cfg.head_dim}",
        ),
    ]
    for bad, message in problems:
        if bad:
            raise UserError(f"{path}: {message}")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.parent.is_dir():
        raise UserError(f"{path.parent}: {what} (no such directory)")
    if not path.is_file():
        raise UserError(f"{path.parent}: {what} (no {path.name})")
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: unreadable JSON ({str(error).splitlines()[0]})") from None
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a JSON object")
    return value


def _weight_files(folder: Path) -> tuple[dict[str, Path], Path]:
    """Tensor name -> file holding it, and the file that lists them (for error messages).

    As transformers does, a single `model.safetensors` wins over an index."""
    single = folder / SINGLE
    if single.is_file():
        return dict.fromkeys(_tensor_names(single), single), single
    index_path = folder / INDEX
    if not index_path.is_file():
        raise UserError(f"{folder}: no {SINGLE} or {INDEX} (only safetensors checkpoints are supported)")
    weight_map = _read_json(index_path, what="not a checkpoint folder").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{index_path}: no weight_map")
    for shard in sorted(set(weight_map.values())):
        if not (folder / shard).is_file():
            raise UserError(f"{index_path}: shard {shard} is missing from {folder}")
    return {name: folder / shard for name, shard in weight_map.items()}, index_path


def _tensor_names(path: Path) -> list[str]:
    try:
        with safe_open(str(path), framework="pt") as handle:
            return list(handle.keys())
    except (SafetensorError, OSError) as error:
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None


def _read_weights(
    folder: Path,
    names: TensorMap,
    shapes: dict[str, tuple[int, ...]],
    dtype: torch.dtype,
    tied: bool,
    device: torch.device,
) -> dict[str, Tensor]:
    located, listing = _weight_files(folder)
    present = {n for n in located if not n.endswith(IGNORED_SUFFIXES)}
    missing = sorted(set(names) - present)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise UserError(f"{listing}: missing tensor {missing[0]}{more} (required by {CONFIG})")
    # A tied checkpoint may still carry a copy of the head; transformers ignores it, so do we.
    unexpected = sorted(present - set(names) - ({"lm_head.weight"} if tied else set()))
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        raise UserError(
            f"{located[unexpected[0]]}: unexpected tensor {unexpected[0]}{more} "
            f"(not part of this {CONFIG}'s architecture)"
        )
    by_file: dict[Path, list[str]] = defaultdict(list)
    for name in names:
        by_file[located[name]].append(name)
    state: dict[str, Tensor] = {}
    for path, published in by_file.items():
        try:
            with safe_open(str(path), framework="pt", device=str(device)) as handle:
                for name in published:
                    state |= _split(handle.get_tensor(name), name, names[name], shapes, path, dtype)
        except SafetensorError as error:
            raise UserError(f"{path}: not a readable safetensors file ({error})") from None
    return state


def _split(
    tensor: Tensor,
    name: str,
    ours: tuple[str, ...],
    shapes: dict[str, tuple[int, ...]],
    path: Path,
    dtype: torch.dtype,
) -> dict[str, Tensor]:
    """Check a published tensor's shape against the config and cut a fused one into ours."""
    parts = [shapes[o] for o in ours]
    expected = (sum(p[0] for p in parts), *parts[0][1:])
    if tuple(tensor.shape) != expected:
        raise UserError(f"{path}: tensor {name} has shape {list(tensor.shape)}, but {CONFIG} implies {list(expected)}")
    pieces = tensor.to(dtype).split([p[0] for p in parts])
    # A copy even where the piece is already contiguous: safetensors may hand back a tensor at any
    # byte offset of the file, and CPU kernels round differently on unaligned rows (last-bit logits).
    return {o: piece.clone(memory_format=torch.contiguous_format) for o, piece in zip(ours, pieces)}


def _write_weights(folder: Path, tensors: dict[str, Tensor], max_shard_bytes: int | None) -> None:
    metadata = {"format": "pt"}
    if max_shard_bytes is None:
        save_file(tensors, str(folder / SINGLE), metadata=metadata)
        return
    shards: list[dict[str, Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    weight_map: dict[str, str] = {}
    for number, shard in enumerate(shards, start=1):
        filename = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / filename), metadata=metadata)
        weight_map |= dict.fromkeys(shard, filename)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")


def _load_tokenizer(folder: Path, family: str) -> Any:
    """None for a folder without tokenizer files (it decodes token ids); else `AutoTokenizer` on the
    folder, offline and without remote code (`trust_remote_code=False` also stops transformers from
    asking on stdin). When the tokenizer class lives in remote code, a shipped `tokenizer.json` is
    loaded directly; Dream ships none, but its remote `DreamTokenizer` is Qwen2's byte-level BPE, so
    its `vocab.json`/`merges.txt` are read as a `Qwen2Tokenizer`. An empty model config keeps
    transformers from parsing config.json, whose model_type it does not know."""
    from transformers import AutoTokenizer, PretrainedConfig, PreTrainedTokenizerFast, Qwen2Tokenizer

    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True, config=PretrainedConfig(), trust_remote_code=False
        )
    except Exception as error:  # noqa: BLE001 - transformers raises many types for an unusable folder
        problem: Exception = error
        try:
            if (folder / "tokenizer.json").is_file():
                return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
            if family == "dream" and (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
                return Qwen2Tokenizer.from_pretrained(str(folder), local_files_only=True)
        except Exception as fallback:  # noqa: BLE001 - the tokenizers library raises a bare Exception
            problem = fallback
        first_line = (str(problem).strip().splitlines() or [type(problem).__name__])[0]
        raise UserError(
            f"{folder}: no loadable tokenizer files ({first_line}); fix or remove the tokenizer "
            "files (without any, the folder decodes token ids)"
        ) from None


def _token_ids(
    raw: dict[str, Any],
    tokenizer: Any,
    fmt: CheckpointFormat,
    cfg: ModelConfig,
    path: Path,
    mask_override: int | None,
    eos_override: int | None,
    flags: dict[str, str],
) -> tuple[int, int]:
    """Mask and eos ids: the override (a flag), then config.json (the published configs carry them),
    then the tokenizer's special tokens, then (mask only) the family's published default when the
    vocabulary has room for it."""
    default_mask = family_spec(fmt.family).default_mask_id
    candidates = {
        "mask": [
            mask_override,
            raw.get("mask_token_id"),
            getattr(tokenizer, "mask_token_id", None),
            default_mask if default_mask < cfg.vocab_size else None,
        ],
        "eos": [eos_override, raw.get("eos_token_id"), getattr(tokenizer, "eos_token_id", None)],
    }
    found = {kind: next((v for v in values if v is not None and v != []), None) for kind, values in candidates.items()}
    missing = [kind for kind, value in found.items() if value is None]
    if missing:  # every missing id at once, and where it was looked for
        flag = [flags.get(f"{kind}_id", f"--{kind}-id") for kind in missing]
        tokenizer_says = "the tokenizer names none" if tokenizer is not None else "the folder has no tokenizer"
        raise UserError(
            f"{path}: no {' and no '.join(missing)} token id ({CONFIG} has no "
            f"{' or '.join(k + '_token_id' for k in missing)} and {tokenizer_says}); give "
            f"{'it' if len(missing) == 1 else 'them'} with {' and '.join(flag)}"
        )
    ids = []
    for kind, value in found.items():
        if isinstance(value, list):  # eos_token_id may list several stop tokens
            value = value[0]
        ids.append(check_token_id(value, cfg.vocab_size, f"{kind} id", flags.get(f"{kind}_id", f"--{kind}-id")))
    return ids[0], ids[1]


def check_token_id(value: Any, vocab_size: int, what: str, flag: str) -> int:
    """`value` as a token id of a vocabulary of `vocab_size`, else a one-line error naming `flag`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
        raise UserError(
            f"{what} {value!r} is not a token id of this target's vocabulary "
            f"(0..{vocab_size - 1}); give {flag} below {vocab_size}"
        )
    return value

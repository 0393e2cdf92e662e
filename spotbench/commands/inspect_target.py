"""`spotbench target NAME`: load a target and print what it is (family, size, token ids)."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "target", help="load a target (tiny-random:<family> or a checkpoint folder) and describe it"
    )
    parser.add_argument("name", help="tiny-random:<family>[:seed] or a local checkpoint folder")
    parser.add_argument("--mask-id", help="mask token id, overriding the checkpoint's config and tokenizer")
    parser.add_argument("--eos-id", help="end-of-sequence token id, overriding the checkpoint's config and tokenizer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.errors import UserError
    from harness.targets.registry import load_target
    from harness.targets.target import DLMTarget
    from harness.validation import NonNegativeInt, check_value
    from tasks.chat import Chat

    ids = {
        key: None if getattr(args, key) is None else check_value(NonNegativeInt, getattr(args, key), flag)
        for key, flag in (("mask_id", "--mask-id"), ("eos_id", "--eos-id"))
    }
    target = load_target(args.name, mask_id=ids["mask_id"], eos_id=ids["eos_id"])
    if not isinstance(target, DLMTarget):  # (its fields below are a diffusion target's)
        raise UserError(f"{args.name} is an autoregressive target; spotbench target describes diffusion targets")
    cfg = target.model.cfg
    info = {
        "name": target.name,
        "family": target.family.name,
        "attention": target.family.attention,
        "shifted_logits": target.family.shifted_logits,
        "parameters": sum(p.numel() for p in target.model.parameters()),
        "vocab_size": cfg.vocab_size,
        "layers": cfg.num_layers,
        "hidden_size": cfg.hidden_size,
        "moe_experts": cfg.moe.num_experts if cfg.moe else 0,
        "mask_id": target.mask_id,
        "eos_id": target.eos_id,
        "dtype": str(target.dtype).removeprefix("torch."),
        "tokenizer": type(target.tokenizer).__name__ if target.tokenizer is not None else "none (prompts as token ids)",
        "chat_template": Chat(target.tokenizer).label,
    }
    if args.json:
        print(json.dumps(info))
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(f"{key:<{width}}  {value}")
    return 0

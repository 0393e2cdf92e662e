"""`spotbench decode`: prompts through plain and speculative decoding, side by side, with the verdict.

Each prompt is decoded twice with the same seed: plain (the reference) and speculative with the
chosen proposer and budget; the lossless check compares them. Exit status: 0 when every prompt is
lossless (exact, or in a fast mode a near-tie flip), 1 when a divergence is a logic error or, with
--exact, when there is any divergence at all; 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.errors import UserError
from spotbench.commands import add_block_length_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "decode", help="decode prompts plainly and speculatively and check that the outputs are equal"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="one prompt (text; through the tokenizer's chat template when it has one)")
    source.add_argument("--prompts", type=Path, help="a file with one prompt per line")
    source.add_argument("--prompt-ids", help="one prompt as token ids, e.g. 1,2,3 (no template; for any target)")
    source.add_argument("--prompt-ids-file", type=Path, help="a JSONL file with one list of token ids per line")
    parser.add_argument(
        "--model",
        default="tiny-random:sdar",
        help="target: tiny-random:<family>[:seed] or a checkpoint folder; autoregressive: "
        "smollm2, tiny-random-ar[:seed] or a causal-LM folder",
    )
    parser.add_argument(
        "--proposer",
        default="confidence",
        help="oracle, oracle-order, confidence, confidence-branch, spot[:CHECKPOINT_DIR], "
        "spiffy[:GRAPH_DIR] or spot-sets[:CHECKPOINT_DIR] (refused where fitted to another "
        "model, block length or rule); for autoregressive targets oracle, prompt-lookup "
        "or draft-model:NAME",
    )
    # numbers stay text here: the suite's field validators check them, as they check a suite file
    parser.add_argument("--budget", default="8", help="most draft nodes per pass (0 = plain decoding)")
    parser.add_argument("--rule", default="top1", help="top1 or threshold:TAU, TAU in (0, 1]")
    parser.add_argument("--temperature", default="0")
    parser.add_argument("--seed", default="0", help="noise seed in [0, 2**64)")
    parser.add_argument("--gen-length", default="64")
    add_block_length_arguments(parser)
    parser.add_argument("--mask-id", help="mask token id, overriding the checkpoint's config and tokenizer")
    parser.add_argument("--eos-id", help="end-of-sequence token id, overriding the checkpoint's config and tokenizer")
    parser.add_argument(
        "--chat-template",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="text prompts through the tokenizer's chat template when it has one (default: on)",
    )
    parser.add_argument("--system-prompt", help="a system turn before each text prompt (needs a chat template)")
    parser.add_argument("--exact", action="store_true", help="exactness mode: float64, rows one by one")
    parser.add_argument(
        "--ar-sampling",
        default="coupled",
        help="autoregressive targets: coupled (token-exact) or rejection (rejection sampling, "
        "lossless in distribution: verdict 'distribution' at T>0)",
    )
    parser.add_argument("--device", default="auto", help="auto (a GPU when visible, else the CPU), cpu, cuda, cuda:N")
    parser.add_argument(
        "--dtype", default="auto", help="auto (bf16 on a GPU, float32 on a CPU), bfloat16, float16, float32, float64"
    )
    parser.add_argument("--near-tie", help="decision gap below which a divergence is a near-tie (default: by dtype)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    parser.set_defaults(func=run)


FLAGS = {
    "models": "--model",
    "proposers": "--proposer",
    "budgets": "--budget",
    "rules": "--rule",
    "temperatures": "--temperature",
    "seeds": "--seed",
    "gen_length": "--gen-length",
    "block_length": "--block-length",
    "ar_sampling": "--ar-sampling",
    "mask_id": "--mask-id",
    "eos_id": "--eos-id",
    "chat_template": "--chat-template",
    "system_prompt": "--system-prompt",
}
"""This command's flag for each suite setting, for messages."""


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from cluster.suite import build_suite
    from harness.lossless import near_tie_tolerance
    from harness.pipeline import Group, decode_group, decode_text
    from harness.targets.registry import block_length_trained, load_target
    from harness.validation import NonNegative, check_value
    from proposers import arms, build_proposer
    from tasks.chat import Chat, check_token_id_prompts
    from tasks.prompt_ids import check_in_vocabulary, parse_ids, read_ids_file

    if args.prompt_ids is not None:
        prompts: list[str | list[int]] = [parse_ids(args.prompt_ids, "--prompt-ids")]
    elif args.prompt_ids_file is not None:
        prompts = list(read_ids_file(args.prompt_ids_file))
    else:
        prompts = list(read_prompts(args))
    # one group of a suite, checked as a run checks it; a list of one each, so a comma is no second value
    suite = build_suite(
        {},
        {
            "models": [args.model],
            "proposers": [args.proposer],
            "budgets": [args.budget],
            "rules": [args.rule],
            "temperatures": [args.temperature],
            "seeds": [args.seed],
            "gen_length": args.gen_length,
            "block_length": args.block_length,
            "untrained_block_length": args.untrained_block_length,
            "ar_sampling": args.ar_sampling,
            "mask_id": args.mask_id,
            "eos_id": args.eos_id,
            "chat_template": args.chat_template,
            "system_prompt": args.system_prompt,
        },
        FLAGS,
    )
    near_tie = None if args.near_tie is None else check_value(NonNegative, args.near_tie, "--near-tie")
    if not isinstance(prompts[0], str):
        check_token_id_prompts(
            suite.chat_template,
            suite.system_prompt,
            "--prompt-ids" if args.prompt_ids is not None else "--prompt-ids-file",
        )
    [arm] = arms(suite.proposers, suite.budgets)
    [(temperature, rule, seed)] = suite.groups(args.model)
    target = load_target(args.model, device=args.device, dtype=args.dtype, mask_id=suite.mask_id, eos_id=suite.eos_id)
    if args.exact:
        target = target.exact()
    chat = Chat(target.tokenizer, suite.chat_template, suite.system_prompt)
    if isinstance(prompts[0], str):
        if target.tokenizer is None:
            raise UserError(
                f"target {args.model!r} has no tokenizer to encode text prompts; "
                "give token ids with --prompt-ids or --prompt-ids-file"
            )
        chat.check(args.model)
    tolerance = near_tie if near_tie is not None else near_tie_tolerance(target.dtype)
    status = 0
    for index, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            text, label = (chat.render(prompt) if chat.applies else prompt), chat.label
            ids = tuple(target.tokenizer.encode(text, add_special_tokens=False))
        else:
            ids, label = tuple(check_in_vocabulary(prompt, target.vocab_size)), "none"
            text = decode_text(target, list(ids))
        group = Group(
            target.name,
            "prompt",
            str(index),
            ids,
            temperature,
            rule,
            seed,
            suite.gen_length,
            suite.block_length_for(args.model),
            text,
            chat_template=label,
            block_length_trained=block_length_trained(args.model, suite.block_length_for(args.model)),
        )
        [row] = decode_group(
            target, group, [arm], build_proposer, None, args.exact, tolerance, ar_sampling=suite.ar_sampling
        )
        if row.verdict == "logic-error" or (args.exact and row.exact is False):
            status = 1
        result = dataclasses.asdict(row)
        print(json.dumps(result) if args.json else render(index, result))
    return status


def read_prompts(args: argparse.Namespace) -> list[str]:
    if args.prompt is not None:
        prompts = [args.prompt]
    else:
        try:
            prompts = [line for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
        except OSError as error:
            raise UserError(f"cannot read --prompts {args.prompts}: {error.strerror}") from None
        except UnicodeDecodeError:
            raise UserError(f"--prompts {args.prompts} is not UTF-8 text") from None
    if not prompts or not all(p.strip() for p in prompts):
        raise UserError("no prompt to decode: give a non-empty --prompt or a --prompts file with text lines")
    return prompts


METRICS = ["nfe", "rows", "commits", "tokens", "wall_s", "target_s", "proposer_s", "other_s"]


def render(index: int, row: dict) -> str:
    lines = [f"prompt {index}: {row['prompt']!r}", f"  {'metric':<18}{'plain':>12}{'spec':>12}"]
    for key in METRICS:
        lines.append(f"  {key:<18}{_cell(row['plain_' + key]):>12}{_cell(row['spec_' + key]):>12}")
    lines.append(f"  {'mean_accept_len':<18}{1.0:>12.4f}{row['mean_accept_len']:>12.4f}")
    lines.append(f"  {'accepted/depth':<18}{'':>12}  {row['accepted_per_depth']}")
    lines.append(f"  speedup_nfe {row['speedup_nfe']:.2f}x   speedup_wall {row['speedup_wall']:.2f}x")
    verdict = row["verdict"]
    if verdict == "distribution":
        verdict += " (rejection sampling: equal to plain decoding in distribution, not token for token)"
    elif verdict != "exact":
        verdict += (
            f" at step {row['divergence_step']}, token {row['divergence_token']}: confidence margin "
            f"{row['divergence_confidence_margin']}, decision gap {row['divergence_decision_gap']} "
            f"(near-tie below {row['near_tie_tolerance']:g})"
        )
    lines.append(f"  lossless: {verdict}")
    lines.append(f"  answer: {row['completion']!r}")
    if row["spec_completion"] != row["completion"]:  # rejection sampling at T>0 (or a divergence)
        lines.append(f"  spec answer: {row['spec_completion']!r}")
    return "\n".join(lines)


def _cell(value: float | int) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)

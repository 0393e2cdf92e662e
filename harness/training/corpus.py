"""Training text for the tiny targets: (prompt, reference answer) pairs from tasks' train splits.

Prompts come from each task's own prompt builder, so a zoo model is trained on exactly the format it
is evaluated with. Only train splits are read: nothing from a test split trains anything.
"""

from __future__ import annotations

import random

from harness.training.objective import Example


def training_pairs(task_names: list[str]) -> list[tuple[str, str]]:
    """Zero-shot prompts (tiny models have short contexts) and each sample's reference completion."""
    from tasks.registry import get_task

    pairs = []
    for name in task_names:
        task = get_task(name.strip(), num_fewshot=0)
        pairs += [(task.prompt(s), s.target) for s in task.load("train")]
    return pairs


def encode_examples(pairs: list[tuple[str, str]], tokenizer, recipe) -> list[Example]:
    """Tokenize, drop pairs that do not fit, pad answers with EOS; shuffled by the recipe's seed."""
    eos = tokenizer.eos_token_id
    examples = []
    for prompt, answer in pairs:
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
        if len(prompt_ids) <= recipe.prompt_max_tokens and len(answer_ids) <= recipe.answer_length:
            examples.append(Example(prompt_ids, answer_ids + [eos] * (recipe.answer_length - len(answer_ids))))
    random.Random(recipe.seed).shuffle(examples)
    return examples

"""Training text for the tiny targets: (prompt, reference answer) pairs encoded as examples.

The caller reads the pairs from tasks' train splits (`tasks.registry.train_pairs`), so a zoo model is
trained on exactly the format it is evaluated with and nothing from a test split trains anything.
"""

from __future__ import annotations

import random

from harness.training.objective import Example


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

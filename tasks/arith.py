"""arith: an offline, built-in task of short GSM-style arithmetic word problems.

Generated procedurally (shopping, ages, speeds, savings, sharing, production rates, packs, rows),
two or three steps each, exact integer answers, in GSM8K's answer format (one reasoning line per
step, then `#### n`), so the GSM8K scorer and prompts apply unchanged. Deterministic: item i of a
split comes from `random.Random(<split base> + i)`, skipping duplicates; the train split also skips
every question that is in the test split, so the splits never share a question. Questions are a few
dozen tokens, to train and test tiny models; the default task, since it needs no data files.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from tasks.base import Sample, SelfCheck, render, self_check
from tasks.gsm8k import INSTRUCTION, format_example, score_numbers

SPLIT_BASES = {"test": 0, "train": 1_000_000}
SPLIT_SIZES = {"test": 500, "train": 20_000}
NAMES = (
    "Ana",
    "Ben",
    "Cara",
    "Dev",
    "Eli",
    "Fay",
    "Gus",
    "Hana",
    "Ivan",
    "Jo",
    "Kai",
    "Lea",
    "Max",
    "Nia",
    "Omar",
    "Pia",
    "Raj",
    "Sara",
    "Tom",
    "Uma",
    "Vic",
    "Wen",
    "Yara",
    "Zoe",
)
ITEMS = (
    "apple",
    "pencil",
    "notebook",
    "cookie",
    "ticket",
    "marble",
    "sticker",
    "candle",
    "book",
    "lemon",
    "card",
    "toy car",
    "cupcake",
    "balloon",
    "eraser",
)
VEHICLES = ("car", "bus", "train", "truck", "boat", "cyclist")
THINGS = ("bottle", "crate", "bolt", "shirt", "cup", "brick")

Problem = tuple[str, list[str], int]  # question, reasoning lines, answer


def shopping(r: random.Random) -> Problem:
    name, item, n, price = r.choice(NAMES), r.choice(ITEMS), r.randint(2, 9), r.randint(2, 12)
    cost = n * price
    bill = next(b for b in (10, 20, 50, 100, 200) if b > cost)
    return (
        (f"{name} buys {n} {item}s at ${price} each and pays with a ${bill} bill. How much change does {name} get?"),
        [
            f"The {item}s cost {n} * {price} = {cost} dollars.",
            f"The change is {bill} - {cost} = {bill - cost} dollars.",
        ],
        bill - cost,
    )


def ages(r: random.Random) -> Problem:
    a, b = r.sample(NAMES, 2)
    gap, age, years = r.randint(2, 30), r.randint(3, 40), r.randint(2, 15)
    return (
        (f"{a} is {gap} years older than {b}. {b} is {age} years old. How old will {a} be in {years} years?"),
        [
            f"{a} is {age} + {gap} = {age + gap} years old now.",
            f"In {years} years {a} will be {age + gap} + {years} = {age + gap + years}.",
        ],
        age + gap + years,
    )


def speed(r: random.Random) -> Problem:
    vehicle, kmh = r.choice(VEHICLES), r.randint(2, 12) * 5
    hours, extra = r.randint(2, 6), r.randint(3, 40)
    return (
        (
            f"A {vehicle} travels at {kmh} km per hour for {hours} hours, then {extra} km more. "
            f"How many km does it travel in total?"
        ),
        [
            f"In {hours} hours it travels {kmh} * {hours} = {kmh * hours} km.",
            f"In total it travels {kmh * hours} + {extra} = {kmh * hours + extra} km.",
        ],
        kmh * hours + extra,
    )


def savings(r: random.Random) -> Problem:
    name, weekly, weeks = r.choice(NAMES), r.randint(3, 25), r.randint(3, 12)
    total = weekly * weeks
    spent = r.randint(1, total - 1)
    return (
        (f"{name} saves ${weekly} each week for {weeks} weeks, then spends ${spent}. How many dollars are left?"),
        [
            f"{name} saves {weekly} * {weeks} = {total} dollars.",
            f"After spending, {total} - {spent} = {total - spent} dollars are left.",
        ],
        total - spent,
    )


def sharing(r: random.Random) -> Problem:
    name, item, friends, each, kept = (
        r.choice(NAMES),
        r.choice(ITEMS),
        r.randint(2, 8),
        r.randint(2, 12),
        r.randint(1, 9),
    )
    total = friends * each + kept
    return (
        (
            f"{name} has {total} {item}s, keeps {kept} and shares the rest equally among "
            f"{friends} friends. How many {item}s does each friend get?"
        ),
        [
            f"{name} shares {total} - {kept} = {total - kept} {item}s.",
            f"Each friend gets {total - kept} / {friends} = {each}.",
        ],
        each,
    )


def production(r: random.Random) -> Problem:
    thing, per_minute, hours = r.choice(THINGS), r.randint(2, 9), r.randint(2, 8)
    minutes = hours * 60
    return (
        (f"A machine makes {per_minute} {thing}s per minute. How many {thing}s does it make in {hours} hours?"),
        [
            f"{hours} hours is {hours} * 60 = {minutes} minutes.",
            f"It makes {minutes} * {per_minute} = {minutes * per_minute} {thing}s.",
        ],
        minutes * per_minute,
    )


def packs(r: random.Random) -> Problem:
    name, item, count, size = r.choice(NAMES), r.choice(ITEMS), r.randint(2, 9), r.randint(3, 12)
    total = count * size
    given = r.randint(1, total - 1)
    return (
        (
            f"{name} buys {count} packs of {item}s with {size} in each pack and gives away "
            f"{given}. How many {item}s are left?"
        ),
        [f"{name} has {count} * {size} = {total} {item}s.", f"{total} - {given} = {total - given} are left."],
        total - given,
    )


def rows(r: random.Random) -> Problem:
    name, row_count, per_row = r.choice(NAMES), r.randint(3, 12), r.randint(4, 15)
    dead = r.randint(1, 9)
    planted = row_count * per_row
    return (
        (
            f"{name} plants {row_count} rows of {per_row} trees. {dead} trees die, and {name} "
            f"plants twice that many new ones. How many trees are there now?"
        ),
        [
            f"{name} plants {row_count} * {per_row} = {planted} trees.",
            f"{planted} - {dead} = {planted - dead} trees survive.",
            (f"{name} adds {dead} * 2 = {2 * dead}, so {planted - dead} + {2 * dead} = {planted + dead} trees."),
        ],
        planted + dead,
    )


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (
    shopping,
    ages,
    speed,
    savings,
    sharing,
    production,
    packs,
    rows,
)


def problem(seed: int) -> Problem:
    rng = random.Random(seed)
    return rng.choice(TEMPLATES)(rng)


@cache
def generate(split: str, count: int) -> tuple[Problem, ...]:
    """The first `count` problems of a split (duplicates and, for train, test questions skipped)."""
    excluded = set()
    if split == "train":
        excluded = {question for question, _, _ in generate("test", SPLIT_SIZES["test"])}
    seen: set[str] = set()
    out: list[Problem] = []
    seed = SPLIT_BASES[split]
    while len(out) < count:
        item = problem(seed)
        seed += 1
        if item[0] not in seen and item[0] not in excluded:
            seen.add(item[0])
            out.append(item)
    return tuple(out)


@dataclass
class Arith:
    name: str = "arith"
    splits: tuple[str, ...] = ("test", "train")
    default_split: str = "test"
    stop_strings: tuple[str, ...] = ("Question:", "\n\n")

    def load(self, split: str | None = None, limit: int | None = None, data_dir: str | None = None) -> list[Sample]:
        split = split or self.default_split
        size = SPLIT_SIZES[split] if limit is None else min(limit, SPLIT_SIZES[split])
        return [
            Sample(f"{split}/{i}", q, " " + "\n".join(lines) + f"\n#### {answer}", str(answer))
            for i, (q, lines, answer) in enumerate(generate(split, size))
        ]

    def prompt(self, sample: Sample, tokenizer: Any = None) -> str:
        text = format_example(sample.question)
        return render(f"{INSTRUCTION}\n\n{text}", text, tokenizer)

    def score(self, samples: list[Sample], completions: list[str]) -> list[dict[str, Any]]:
        return score_numbers(samples, completions, self.stop_strings)

    def data_status(self, data_dir: str | None = None) -> str:
        return "built-in"

    def self_check(self, data_dir: str | None = None, limit: int | None = None) -> SelfCheck:
        return self_check(self, data_dir, limit, allowed_rate=0.0)

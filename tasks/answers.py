"""Answer extraction shared by the metric modules: GSM8K numbers and MATH `\\boxed{}` contents."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# lm-evaluation-harness gsm8k filters: "strict-match" and "flexible-extract".
STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def normalize_number(text: str | None) -> Decimal | None:
    """'$1,234.50.' -> Decimal('1234.50'); None when it is not a number."""
    if text is None:
        return None
    cleaned = text.replace(",", "").replace("$", "").rstrip(".")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def strict_number(text: str) -> str | None:
    """The number after the first `#### ` (the GSM8K answer format)."""
    match = STRICT.search(text)
    return match.group(1) if match else None


def flexible_number(text: str) -> str | None:
    """The last number anywhere in the text."""
    matches = FLEXIBLE.findall(text)
    if not matches:
        return None
    return next(group for group in matches[-1] if group)


def numbers_equal(predicted: str | None, reference: str) -> bool:
    value = normalize_number(predicted)
    return value is not None and value == normalize_number(reference)


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed x`), braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:].removeprefix("\\boxed").removeprefix("\\fbox")
    if rest.startswith(" "):
        return rest[1:].split("$")[0].strip() or None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return rest[1:i]
    return None


_FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|$)", re.DOTALL)


def code_block(text: str) -> str:
    """The first fenced code block of a chat-style answer, or the text itself when unfenced."""
    match = _FENCE.search(text)
    return match.group(1) if match else text

"""The context length of an autoregressive base, read without its weights: a conversion refuses blocks
and sequences longer than the positions its base was trained on before the base loads."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from harness.targets.ar import (
    SMOLLM2,
    TINY_AR,
    folder_of,
    gguf_location,
    parse_tiny_ar_name,
    smollm2_file,
    tiny_random_ar,
)

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
"""Where a causal LM's config.json gives its context length, in the order they are read."""


def base_context_length(name: str) -> int | None:
    """The positions the base was trained on (`max_position_embeddings`), read without its weights:
    a folder's config.json, a GGUF file's header (`<architecture>.context_length`), the config of a
    tiny random base (built in code, in milliseconds). None when the base does not say."""
    if name.startswith(TINY_AR):
        return int(tiny_random_ar(parse_tiny_ar_name(name)).model.config.max_position_embeddings)
    path = smollm2_file() if name == SMOLLM2 else folder_of(name)
    if path.suffix == ".gguf" or not (path / "config.json").is_file():
        folder, file = gguf_location(path)
        return gguf_context_length(folder / file)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    values = [config.get(key) for key in CONTEXT_KEYS] if isinstance(config, dict) else []
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
"""GGUF metadata value types of fixed size -> their struct format (8 is a string, 9 an array)."""


def gguf_context_length(path: Path) -> int | None:
    """`<architecture>.context_length` from a GGUF file's metadata, which comes before its tensors:
    the header is read key by key up to it (no tensor is read). None if the file does not say."""

    def read(handle, form: str):
        data = handle.read(struct.calcsize(form))
        if len(data) < struct.calcsize(form):
            raise ValueError("cut short")
        return struct.unpack(form, data)[0]

    def skip(handle, kind: int) -> None:
        if kind == 8:
            handle.seek(read(handle, "<Q"), os.SEEK_CUR)
        elif kind == 9:
            inner, count = read(handle, "<I"), read(handle, "<Q")
            if inner in GGUF_SCALARS:
                handle.seek(struct.calcsize(GGUF_SCALARS[inner]) * count, os.SEEK_CUR)
            else:
                for _ in range(count):
                    skip(handle, inner)
        else:
            handle.seek(struct.calcsize(GGUF_SCALARS[kind]), os.SEEK_CUR)

    try:
        with open(path, "rb") as handle:
            if handle.read(4) != b"GGUF" or read(handle, "<I") < 2:  # version 1 counted in 32 bits
                return None
            read(handle, "<Q")  # tensors
            for _ in range(read(handle, "<Q")):
                key = handle.read(read(handle, "<Q")).decode("utf-8", "replace")
                kind = read(handle, "<I")
                if key.endswith(".context_length") and kind in (0, 2, 4, 10, 1, 3, 5, 11):
                    return int(read(handle, GGUF_SCALARS[kind]))
                skip(handle, kind)
    except (OSError, ValueError, KeyError, struct.error):
        return None
    return None

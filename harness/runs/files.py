"""A run directory's file names and the bytes of its files: Parquet written with page checksums to a
temporary name and renamed into place, read with the checksums verified, and the sha256 of each.

`run_digest`, one sha256 over the manifest, the index, every sample file and the summary, pins a
finished run against a deliberate edit made consistently (rows, index and manifest together), which
the checks of `harness.runs.verify` cannot see: a release records it, and `spotbench gate
--baseline-digest` refuses a baseline that is not the recorded one.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

INDEX_FILE = "index.jsonl"
DAMAGED_DIR = "damaged"
MANIFEST_FILE = "manifest.json"
SUMMARY_FILE = "summary.parquet"
SAMPLES_DIR = "samples"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_parquet(table: pa.Table, final: Path) -> str:
    """Write `table` with page checksums to a temp file, rename it into place; its sha256."""
    temp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    pq.write_table(table, temp, write_page_checksum=True)
    digest = sha256_file(temp)
    os.replace(temp, final)
    return digest


def read_parquet(source: Path | bytes) -> pa.Table:
    """Read with page checksums verified (a flipped bit in a data page raises, not a wrong number).

    Bytes are read from a copy in memory Arrow owns, never from the Python object: Arrow reads on its
    own threads, and when a read fails (a truncated or flipped file) one of them can drop the last
    reference to its source after the error has reached Python. A source backed by a Python object
    then takes the GIL in its destructor; if the interpreter is already exiting, Python ends that
    thread inside the C++ destructor, and the process aborts (`terminate called without an active
    exception`, exit 134) after the command has said its line."""
    if isinstance(source, bytes):
        owned = pa.BufferOutputStream()
        owned.write(source)
        return pq.read_table(pa.BufferReader(owned.getvalue()), page_checksum_verification=True)
    return pq.read_table(source, page_checksum_verification=True)


def run_digest(directory: Path) -> str:
    """One sha256 that pins a run directory's record: over the sha256 of `manifest.json`, `index.jsonl`,
    every sample file and `summary.parquet`, listed as `sha256sum` lists them, so that anyone can
    recompute it: `cd RUN && LC_ALL=C sha256sum manifest.json index.jsonl samples/*.parquet
    summary.parquet | sha256sum`."""
    directory = Path(directory)
    samples = directory / SAMPLES_DIR
    names = [
        MANIFEST_FILE,
        INDEX_FILE,
        *sorted(f"{SAMPLES_DIR}/{p.name}" for p in samples.glob("*.parquet")),
        SUMMARY_FILE,
    ]
    listing = "".join(f"{sha256_file(directory / name)}  {name}\n" for name in names if (directory / name).is_file())
    return hashlib.sha256(listing.encode()).hexdigest()

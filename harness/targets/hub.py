"""Checkpoints named by Hugging Face hub ids (`ORG/NAME`, `ORG/NAME@REVISION`), read from the hub cache.

People name checkpoints the way the ecosystem does (`GSAI-ML/LLaDA-8B-Instruct`) and keep them in the
cache `huggingface_hub` manages, so a target, a `spot:`/`spot-sets:`/`spiffy:` checkpoint or a Psi-Spec
drafter may be given as a hub id. `snapshot_download` resolves it to the snapshot folder of one commit
(downloading when the hub is reachable and the cache lacks it); with `HF_HUB_OFFLINE` set only the cache
is read. The cache is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, read when the name is resolved (so a run's
environment decides, not the one the library was imported in). A local path of the same spelling wins:
a hub id is only what names no existing file or folder. The snapshot's files are checked before any
loads: a blob missing behind its link, or a safetensors shard shorter than its own header says (an
interrupted copy), is a one-line error naming the download that repairs it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from harness.bundled import find
from harness.errors import UserError

HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?")
"""`ORG/NAME` with an optional `@REVISION` (branch, tag or commit hash); one slash, no leading dot."""
TRUE = {"1", "ON", "YES", "TRUE"}


@dataclass(frozen=True)
class Snapshot:
    repo_id: str
    revision: str
    commit: str
    folder: Path
    """`snapshots/<commit>/` in the cache: links to the blobs, under the repository's file names."""

    def record(self) -> str:
        """What a run's manifest keeps of it: which commit of which repository, and its files."""
        files = sorted(str(p.relative_to(self.folder)) for p in self.folder.rglob("*") if p.is_file())
        return f"{self.repo_id}@{self.commit}: {', '.join(files)}"


def hub_cache() -> Path:
    """The hub cache as `huggingface_hub` finds it: `$HF_HUB_CACHE`, else `$HF_HOME/hub`."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return any(os.environ.get(name, "").upper() in TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def is_hub_id(name: str, *under: Path) -> bool:
    """Whether `name` means a hub id: it has the shape and names no local file or folder, nor one
    committed in the zoo (`harness.bundled.find` with the folders `under`)."""
    return HUB_ID.fullmatch(name) is not None and not name.startswith(".") and not find(name, *under).exists()


def local_or_hub(where: str, *under: Path) -> Path:
    """The folder `where` names: a local path or a committed folder (which wins), else a hub id's
    snapshot; nothing found: `where` as typed, for the caller's error."""
    return snapshot(where).folder if is_hub_id(where, *under) else find(where, *under)


def snapshot(name: str) -> Snapshot:
    """The cached snapshot a hub id names (UserError, one line, when it cannot be had)."""
    return _snapshot(name, str(hub_cache()), offline())


@functools.cache
def _snapshot(name: str, cache: str, local_only: bool) -> Snapshot:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RevisionNotFoundError

    match = HUB_ID.fullmatch(name)
    if match is None:
        raise UserError(f"{name!r} is not a hub id; give ORG/NAME or ORG/NAME@REVISION, or a local folder")
    repo_id, revision = match["repo"], match["revision"] or "main"
    fetch = f"`hf download {repo_id} --revision {revision}` with HF_HUB_CACHE={cache}"
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=local_only))
    except RevisionNotFoundError:
        raise UserError(f"{repo_id} has no revision {revision!r} on the hub; give a branch, tag or commit") from None
    except LocalEntryNotFoundError:
        where = "HF_HUB_OFFLINE is set" if local_only else "the hub is unreachable"
        cached = cached_revisions(Path(cache), repo_id)
        have = f"the cache has revisions {', '.join(cached)}" if cached else "the cache has no revision of it"
        raise UserError(
            f"{name} is not in the hub cache {cache} and {where} ({have}); download it first: {fetch}"
        ) from None
    except (HfHubHTTPError, ValueError) as error:  # no such repository, gated, a malformed id
        raise UserError(f"cannot resolve hub id {name}: {str(error).splitlines()[0]}") from None
    check_complete(folder, f"{name} (commit {folder.name} in {cache})", fetch)
    return Snapshot(repo_id, revision, folder.name, folder)


def cached_revisions(cache: Path, repo_id: str) -> list[str]:
    """The refs and commits the cache holds of a repository (for the error that names what is there)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    refs = sorted(p.name for p in (repo / "refs").glob("*") if p.is_file())
    commits = sorted(p.name[:12] for p in (repo / "snapshots").glob("*") if p.is_dir())
    return refs + commits


def check_complete(folder: Path, what: str, fetch: str) -> None:
    """UserError naming the first file of a snapshot whose blob is gone, that a shard index lists and
    the snapshot lacks, or whose safetensors payload is shorter than its header says."""
    repair = f"download it again: {fetch} --force-download"
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() and not path.exists():
            raise UserError(f"{what}: {path.relative_to(folder)} is missing (its blob is gone); {repair}")
    for index in folder.glob("*.safetensors.index.json"):
        shards = set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())
        for shard in sorted(shards):
            if not (folder / shard).is_file():
                raise UserError(f"{what}: shard {shard} that {index.name} lists is missing; {repair}")
    for path in sorted(folder.rglob("*.safetensors")):
        size, expected = path.stat().st_size, safetensors_size(path)
        if expected is None or size < expected:
            said = f"its header says {expected}" if expected is not None else "its header is unreadable"
            raise UserError(f"{what}: {path.relative_to(folder)} is truncated ({size} bytes, {said}); {repair}")


def safetensors_size(path: Path) -> int | None:
    """The size a safetensors file's own header implies (8-byte length, JSON header, then tensor data
    up to the largest end offset); None when the header cannot be read."""
    try:
        with path.open("rb") as file:
            (length,) = struct.unpack("<Q", file.read(8))
            header = json.loads(file.read(length))
    except (OSError, struct.error, ValueError):
        return None
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    return 8 + length + max(ends, default=0)

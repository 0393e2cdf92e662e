"""Input hashes remembered by path and stat: an unchanged file is not read again, any change to its
stat is, and a cache that cannot be read or written only means hashing as before."""

import hashlib
import json
import os

import pytest

from harness import hash_cache
from harness.hash_cache import CACHE_FILE, HashCache, cache_path
from harness.runs import files

OLD_NS = 1_600_000_000 * 10**9  # mtime of a file written long ago


@pytest.fixture
def reads(monkeypatch) -> list:
    """Every file the cache reads to hash it, in order."""
    seen: list = []
    hash_file = files.sha256_file

    def counting(path):
        seen.append(path)
        return hash_file(path)

    monkeypatch.setattr(files, "sha256_file", counting)
    monkeypatch.setattr(hash_cache, "RACY_S", 0.0)  # ctime cannot be set back: files written here count as old
    return seen


def old_file(path, data: bytes):
    path.write_bytes(data)
    os.utime(path, ns=(OLD_NS, OLD_NS))
    return path


def test_an_unchanged_file_is_hashed_once_across_starts(tmp_path, reads) -> None:
    weights = old_file(tmp_path / "model.safetensors", b"weights" * 1000)
    first = HashCache(tmp_path / "cache" / CACHE_FILE)
    assert first.sha256(weights) == hashlib.sha256(weights.read_bytes()).hexdigest()
    first.save()
    again = HashCache(tmp_path / "cache" / CACHE_FILE)  # the next start
    assert again.sha256(weights) == first.sha256(weights) and again.sha256(tmp_path / "." / weights.name)
    assert reads == [weights.resolve()]
    assert json.loads((tmp_path / "cache" / CACHE_FILE).read_text())["files"][str(weights.resolve())]["size"] == 7000


def rewrite_a_tick_later(path) -> None:
    """Other bytes of the same size, the old mtime put back: only ctime says so, once the file
    system's clock has moved on from the first write (a few ms; the same tick is what RACY_S is for)."""
    before, other = path.stat().st_ctime_ns, path.read_bytes()[::-1]
    while path.stat().st_ctime_ns == before:
        old_file(path, other)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: os.utime(p, ns=(OLD_NS, OLD_NS + 1)), id="touched (mtime_ns + 1)"),
        pytest.param(lambda p: old_file(p, p.read_bytes() + b"!"), id="resized, mtime put back"),
        pytest.param(lambda p: rewrite_a_tick_later(p), id="rewritten, size and mtime put back"),
    ],
)
def test_a_changed_stat_is_hashed_again(tmp_path, reads, change) -> None:
    weights = old_file(tmp_path / "model.safetensors", b"weights" * 1000)
    cache = HashCache(tmp_path / CACHE_FILE)
    cache.sha256(weights)
    cache.save()
    change(weights)
    again = HashCache(tmp_path / CACHE_FILE)
    assert again.sha256(weights) == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert len(reads) == 2


def test_a_file_changed_just_before_it_is_hashed_is_not_remembered(tmp_path, monkeypatch) -> None:
    """A second write within the same timestamp tick would leave its stat as it was."""
    fresh = tmp_path / "fresh.bin"
    fresh.write_bytes(b"x")
    monkeypatch.setattr(hash_cache, "RACY_S", 3600.0)
    cache = HashCache(tmp_path / CACHE_FILE)
    cache.sha256(fresh)
    cache.save()
    assert cache.new == {} and not (tmp_path / CACHE_FILE).exists()


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe\x00",
        b"[]",
        json.dumps({"version": 999, "files": {}}).encode(),
        None,  # an entry forged for the file, with a wrong stat type and a short hash
    ],
)
def test_a_corrupt_cache_is_ignored(tmp_path, reads, content) -> None:
    weights = old_file(tmp_path / "w.bin", b"abc")
    path = tmp_path / CACHE_FILE
    if content is None:
        bad = {"size": "3", "mtime_ns": OLD_NS, "ctime_ns": 0, "inode": 0, "sha256": "00"}
        content = json.dumps({"version": 1, "files": {str(weights.resolve()): bad}}).encode()
    path.write_bytes(content)
    cache = HashCache(path)
    assert cache.sha256(weights) == hashlib.sha256(b"abc").hexdigest() and len(reads) == 1
    cache.save()  # replaced by a sound one
    assert HashCache(path).sha256(weights) == hashlib.sha256(b"abc").hexdigest() and len(reads) == 1


def test_an_unwritable_cache_folder_fails_nothing(tmp_path, reads) -> None:
    weights = old_file(tmp_path / "w.bin", b"abc")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = HashCache(blocker / "spotbench" / CACHE_FILE)  # its folder cannot be created: a file is in the way
    assert cache.sha256(weights) == hashlib.sha256(b"abc").hexdigest()
    cache.save()
    assert cache.sha256(weights) == hashlib.sha256(b"abc").hexdigest() and len(reads) == 1  # kept in memory
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        HashCache(locked / CACHE_FILE).sha256(weights)
        HashCache(locked / CACHE_FILE).save()
        assert list(locked.iterdir()) == []


def test_the_cache_lives_in_the_users_cache_folder(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SPOTBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_path() == tmp_path / "mine" / CACHE_FILE
    monkeypatch.delenv("SPOTBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path() == tmp_path / "xdg" / "spotbench" / CACHE_FILE
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path() == tmp_path / "home" / ".cache" / "spotbench" / CACHE_FILE

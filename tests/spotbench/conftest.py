"""The check every malformed input must pass, as the fixture `clear_error` (tests/conftest.py counts
how many of them got a clear error after a run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from spotbench.cli import main


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture
def clear_error(tmp_path, monkeypatch, capsys) -> Callable[..., None]:
    """`clear_error(argv, message, files={})` runs the CLI in this process in an empty folder (the
    data dir its data/) after making `files` there, and checks the one clear line: exit 2, one stderr
    line `spotbench: error: ...` that holds `message` (a part naming the problem), no traceback, and
    nothing written (no run directory, checkpoint or output)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPOTBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def check(argv: list[str], message: str, files: dict[str, str | bytes] | None = None) -> None:
        for name, content in (files or {}).items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            getattr(tmp_path / name, "write_bytes" if isinstance(content, bytes) else "write_text")(content)
        before = _snapshot(tmp_path)
        assert main(argv) == 2
        _out, err = capsys.readouterr()
        assert err.startswith("spotbench: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert message in err, err
        assert _snapshot(tmp_path) == before  # nothing written: no run directory, checkpoint or output

    return check

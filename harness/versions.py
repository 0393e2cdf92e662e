"""Which code made a file: the git revision of the checkout and the versions of the packages, recorded
in a run's manifest and in a trained checkpoint's metadata."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def git_revision() -> str | None:
    """HEAD of the checkout spotbench runs from, `+dirty` when it has uncommitted changes; None for an
    installed package (no checkout around it: git would report whatever repository holds the venv)."""
    if not (PROJECT_ROOT / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("spotbench", "torch", "ray", "pyarrow", "transformers", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions

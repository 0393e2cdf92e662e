"""Where the committed zoo and suites are, in a checkout and in an installed wheel.

A checkout keeps them at its root (`zoo/`, `suites/`, beside the packages); a wheel ships copies
inside this package (`harness/data/zoo`, `harness/data/suites`: setup.py maps them there), since
an installed package has no checkout around it. Every lookup of a committed model, checkpoint, recipe
or suite goes through here, so both find the same files, from any working directory.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_ROOT = PACKAGE_DIR.parent
FOLDERS = ("zoo", "suites")


def bundled_dir(name: str) -> Path:
    """The `zoo` or `suites` folder: the copy an installed wheel carries, else the checkout's."""
    installed = PACKAGE_DIR / "data" / name
    return installed if installed.is_dir() else CHECKOUT_ROOT / name


ZOO_DIR = bundled_dir("zoo")
SUITES_DIR = bundled_dir("suites")


def find(where: str | Path, *under: Path) -> Path:
    """The path `where` names: itself when it exists (relative to the working directory), else the
    same name inside one of the folders `under` (`spot-sdar-a` in zoo/proposers/), else a
    checkout-relative path (`zoo/proposers/X`, `suites/X.yaml`) inside the zoo or suites found above.
    Nothing found: `where` unchanged, for the caller's error naming what the user typed."""
    path = Path(where)
    if path.exists() or not str(where):
        return path
    for folder in under:
        if (folder / path).exists():
            return folder / path
    parts = path.parts
    if len(parts) > 1 and parts[0] in FOLDERS and bundled_dir(parts[0]).joinpath(*parts[1:]).exists():
        return bundled_dir(parts[0]).joinpath(*parts[1:])
    return path

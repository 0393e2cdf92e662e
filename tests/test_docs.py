"""Docs pages stay reference pages: at most 250 lines each (measured tables live on the results pages,
docs/results/, one per measurement, with the command that made each table)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 250


def pages(root: Path) -> list[Path]:
    """Every Markdown page a reader is sent to: the README, CONTRIBUTING, the zoo's README and docs/."""
    found = [root / name for name in ("README.md", "CONTRIBUTING.md", "zoo/README.md")]
    return [p for p in found if p.is_file()] + sorted((root / "docs").rglob("*.md"))


def long_pages(paths: list[Path], limit: int = LIMIT) -> list[str]:
    counts = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    return [f"{p.name}: {n} lines" for p, n in counts.items() if n > limit]


def test_every_docs_page_is_at_most_250_lines() -> None:
    found = pages(ROOT)
    assert ROOT / "README.md" in found and ROOT / "docs" / "runs.md" in found and len(found) > 10
    assert not long_pages(found), "split the page by concern, or move its measured tables to docs/results/"


def test_a_page_of_251_lines_is_reported_and_one_of_250_is_not(tmp_path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("line\n" * LIMIT)
    (tmp_path / "docs" / "long.md").write_text("line\n" * (LIMIT + 1))
    assert long_pages(pages(tmp_path)) == ["long.md: 251 lines"]

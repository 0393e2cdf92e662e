"""The zoo and suites are found the same way from a checkout and from an installed wheel, from any
working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import bundled
from harness.bundled import SUITES_DIR, ZOO_DIR, bundled_dir, find
from harness.validation import read_mapping


def test_an_existing_path_is_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spot-sdar-a").mkdir()  # a local folder of a zoo name wins over the zoo's
    assert find("spot-sdar-a", ZOO_DIR / "proposers") == Path("spot-sdar-a")


def test_a_name_is_found_in_its_zoo_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert find("spot-sdar-a", ZOO_DIR / "proposers") == ZOO_DIR / "proposers" / "spot-sdar-a"
    assert find("psi-ar-a", ZOO_DIR / "drafters") == ZOO_DIR / "drafters" / "psi-ar-a"


def test_a_checkout_relative_path_works_from_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert find("zoo/proposers/spiffy-sdar-a") == ZOO_DIR / "proposers" / "spiffy-sdar-a"
    assert find("suites/default.yaml") == SUITES_DIR / "default.yaml"
    assert read_mapping("suites/default.yaml", "suite") == read_mapping(SUITES_DIR / "default.yaml", "suite")


def test_what_is_nowhere_comes_back_as_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert find("zoo/proposers/no-such-folder", ZOO_DIR / "proposers") == Path("zoo/proposers/no-such-folder")
    assert find("nowhere/default.yaml") == Path("nowhere/default.yaml")


def test_an_installed_copy_is_preferred_to_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert bundled_dir("zoo") == bundled.CHECKOUT_ROOT / "zoo"  # this checkout has no harness/data/
    (tmp_path / "data" / "suites").mkdir(parents=True)
    monkeypatch.setattr(bundled, "PACKAGE_DIR", tmp_path)
    assert bundled_dir("suites") == tmp_path / "data" / "suites"
    assert bundled_dir("zoo") == bundled.CHECKOUT_ROOT / "zoo"

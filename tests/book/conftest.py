"""Fixtures for the book split: the verified mirror (never the network) and settings on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.settings import Settings
from app.tasks.book.source import COMMIT

REPO = Path(__file__).resolve().parents[2]


def mirror_dir() -> Path:
    env = os.environ.get("SCALING_GRADER_BOOK_MIRROR")
    return Path(env) if env else REPO.parent / "shared" / "book" / COMMIT


@pytest.fixture(scope="session")
def mirror() -> Path:
    path = mirror_dir()
    assert (path / "SHA256SUMS").is_file(), f"verified book mirror not found at {path}"
    return path


@pytest.fixture
def settings(mirror: Path, tmp_path: Path) -> Settings:
    return Settings(book_mirror=mirror, book_cache=tmp_path / "cache")


@pytest.fixture(scope="session")
def chapters(mirror: Path, tmp_path_factory: pytest.TempPathFactory):
    from app.tasks.book.source import load_chapters

    return load_chapters(Settings(book_mirror=mirror, book_cache=tmp_path_factory.mktemp("c")))


@pytest.fixture(scope="session")
def bank(mirror: Path, tmp_path_factory: pytest.TempPathFactory):
    from app.tasks.book.bank import parse_bank

    return parse_bank(Settings(book_mirror=mirror, book_cache=tmp_path_factory.mktemp("b")))

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.settings import Settings
from app.tasks.exam.bank import build_tasks
from app.tasks.exam.source import BOOK_COMMIT

REPO = Path(__file__).resolve().parents[2]


def mirror_path() -> Path:
    env = os.environ.get("SCALING_GRADER_BOOK_MIRROR")
    path = Path(env) if env else REPO.parent / "shared" / "book" / BOOK_COMMIT
    if not (path / "SHA256SUMS").is_file():
        pytest.fail(f"verified book mirror not found at {path}; set SCALING_GRADER_BOOK_MIRROR")
    return path


@pytest.fixture(scope="session")
def book_mirror() -> Path:
    return mirror_path()


@pytest.fixture(scope="session")
def exam_settings(book_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(book_mirror=book_mirror, book_cache=tmp_path_factory.mktemp("book-cache"))


@pytest.fixture(scope="session")
def exam_tasks(exam_settings: Settings):
    return build_tasks(exam_settings)

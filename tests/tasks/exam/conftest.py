from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from app.tasks.exam.bank import build_tasks
from tests.support.book_mirror import mirror_path


@pytest.fixture(scope="session")
def book_mirror() -> Path:
    return mirror_path()


@pytest.fixture(scope="session")
def exam_settings(book_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(book_mirror=book_mirror, book_cache=tmp_path_factory.mktemp("book-cache"))


@pytest.fixture(scope="session")
def exam_tasks(exam_settings: Settings):
    return build_tasks(exam_settings)

from __future__ import annotations

import pytest

from app.settings import Settings
from app.tasks.base import FiniteBank
from app.tasks.tasks.bank import RowsTask, build_tasks, load_bank


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def bank(settings: Settings) -> FiniteBank:
    return load_bank(settings)


@pytest.fixture(scope="session")
def rows_tasks() -> list[RowsTask]:
    return build_tasks()

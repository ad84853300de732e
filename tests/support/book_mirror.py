"""Where tests find the verified book mirror: $SCALING_GRADER_BOOK_MIRROR, else ../shared/book/<commit>
beside the repository. Missing is a failure, not a skip: these tests are core."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.tasks.book.source import COMMIT as BOOK_COMMIT

REPO = Path(__file__).resolve().parents[2]


def mirror_path() -> Path:
    env = os.environ.get("SCALING_GRADER_BOOK_MIRROR")
    path = Path(env) if env else REPO.parent / "shared" / "book" / BOOK_COMMIT
    if not (path / "SHA256SUMS").is_file():
        pytest.fail(f"verified book mirror not found at {path}; set SCALING_GRADER_BOOK_MIRROR")
    return path

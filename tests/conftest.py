"""Session-wide test settings: the verified book mirror from ../shared, a private book cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK_COMMIT = "772889525cbeca175408a0547b1b5fab4760f26c"
BOOK_MIRROR = (ROOT.parent / "shared" / "book" / BOOK_COMMIT).resolve()

os.environ.setdefault("SCALING_GRADER_BOOK_MIRROR", str(BOOK_MIRROR))
os.environ.setdefault("SCALING_GRADER_BOOK_CACHE", tempfile.mkdtemp(prefix="sg-book-cache-"))


@pytest.fixture(scope="session")
def server_url():
    from tests.support.server import running_server

    with running_server() as url:
        yield url

"""Fixtures for the book split: the verified mirror (never the network) and settings on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from app.settings import Settings
from tests.support.book_mirror import mirror_path


@pytest.fixture(scope="session")
def mirror() -> Path:
    return mirror_path()


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


@pytest.fixture
def server(service_env: Settings) -> Iterator[str]:
    """The real app (create_app) plus the coverage router, served by uvicorn on loopback."""
    from app.api.coverage import router
    from app.main import create_app

    app = create_app(service_env)
    app.include_router(router)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.started
    port = srv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)



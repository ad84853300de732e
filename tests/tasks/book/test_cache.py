"""Parsed banks shared through Redis: a second process with an empty disk cache and no book
source at all loads the book split from what the first one parsed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.settings import Settings
from app.tasks.book import bank as book_bank
from app.tasks.book.cache import RedisBankCache
from tests.conftest import BOOK_MIRROR
from tests.support.server import ROOT

pytestmark = pytest.mark.slow  # real workers, servers or sandboxes: left out of `make test-fast`


def test_second_replica_loads_the_parse_from_redis(tmp_path, redis_server) -> None:
    first = Settings(redis_url=redis_server.url, book_mirror=BOOK_MIRROR, book_cache=tmp_path / "one")
    parsed = book_bank.load_bank(first)
    key = book_bank.cache_key()
    assert RedisBankCache(redis_server.url).get(key) is not None
    # A replica with another (empty) disk cache and a mirror that does not exist: only Redis can
    # give it the bank. It must come out identical.
    code = (
        "import json, pathlib\n"
        "from app.settings import Settings\nfrom app.tasks.book.bank import load_bank\n"
        f"s = Settings(redis_url={redis_server.url!r}, book_mirror=pathlib.Path({str(tmp_path / 'nowhere')!r}),"
        f" book_cache=pathlib.Path({str(tmp_path / 'two')!r}))\n"
        "b = load_bank(s)\nprint(json.dumps([[t.id, t.prompt] for t in b.tasks()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    assert json.loads(out.stdout) == [[t.id, t.prompt] for t in parsed.tasks()]


def test_redis_down_degrades_to_disk(tmp_path, redis_server) -> None:
    settings = Settings(redis_url=redis_server.url, book_mirror=BOOK_MIRROR, book_cache=tmp_path / "c")
    book_bank.load_bank(settings)
    redis_server.stop()
    again = book_bank.load_bank(settings)  # disk layer answers; Redis errors are only a miss
    assert again.size() and again.size() > 50

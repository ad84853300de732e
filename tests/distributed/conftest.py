from __future__ import annotations

import pytest

from tests.support.redis_server import RedisServer


@pytest.fixture
def redis_server():
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()

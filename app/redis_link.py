"""Reaching Redis: the synchronous connection the queues and workers use, and the errors that
mean Redis is unreachable (as opposed to a command Redis refused)."""

from __future__ import annotations

import redis

REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def sync_connection(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=3, health_check_interval=10)

"""Reaching Redis: the synchronous connection the queues and workers use, and the errors that
mean Redis is unreachable (as opposed to a command Redis refused)."""

from __future__ import annotations

import socket

import redis

REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
# TCP keepalive for a connection that may sit idle on a read (a subscription): probes after 5 s of
# silence, every 2 s, the third unanswered one ends it (about 11 s). Linux's options.
KEEPALIVE = {socket.TCP_KEEPIDLE: 5, socket.TCP_KEEPINTVL: 2, socket.TCP_KEEPCNT: 3}


def sync_connection(url: str, max_connections: int | None = None) -> redis.Redis:
    """``max_connections``: a bounded pool, a command past that many in flight waiting (up to 5 s,
    then a connection error) for a free connection; None: redis-py's default pool, which opens one
    for every command in flight at once (one per thread using it) and keeps them."""
    options = dict(socket_timeout=10, socket_connect_timeout=3, health_check_interval=10)
    if max_connections is None:
        return redis.Redis.from_url(url, **options)
    pool = redis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=5, **options)
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # closed with the client, as from_url's own pool
    return client

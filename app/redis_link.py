"""Reaching Redis: the synchronous connection the queues and workers use, and the errors that
mean Redis is unreachable (as opposed to a command Redis refused)."""

from __future__ import annotations

import socket

import redis

REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
# TCP keepalive for a connection that may sit idle on a read (a subscription): probes after 5 s of
# silence, every 2 s, the third unanswered one ends it (about 11 s). Linux's options.
KEEPALIVE = {socket.TCP_KEEPIDLE: 5, socket.TCP_KEEPINTVL: 2, socket.TCP_KEEPCNT: 3}


def sync_connection(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=3, health_check_interval=10)

"""429s, counted where an operator looks: per API process in Prometheus
(``scaling_grader_refused_total{reason}``), and with Redis for the whole deployment (every
replica's status page and /metrics see the same figures, like app.jobs.grade_log) in the same
10-second buckets as the grade window. Reasons are a closed set: rate_limited (requests per
second) and too_many_in_flight (queued gradings held)."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any

from prometheus_client import Counter

from app.grade_ledger import WINDOW_BUCKET_SECONDS, WINDOW_BUCKETS
from app.jobs.keys import PREFIX
from app.observability import REGISTRY
from app.redis_link import REDIS_ERRORS

REASONS = ("rate_limited", "too_many_in_flight")
REFUSED = Counter("scaling_grader_refused_total", "429 refusals of this API process, by reason", ["reason"],
                  registry=REGISTRY)
TOTALS_KEY = f"{PREFIX}:refused:total"
_WINDOW_SECONDS = WINDOW_BUCKET_SECONDS * WINDOW_BUCKETS
_local: deque[tuple[float, str]] = deque(maxlen=100_000)  # embedded mode's window


def _bucket_key(start: int) -> str:
    return f"{PREFIX}:refused:window:{start}"


async def count_refusal(redis: Any, reason: str) -> None:
    """Count one 429 (redis: the async client, None in embedded mode). Never fails the request."""
    now = time.time()
    REFUSED.labels(reason).inc()
    if redis is None:
        _local.append((now, reason))
        return
    start = int(now) // WINDOW_BUCKET_SECONDS * WINDOW_BUCKET_SECONDS
    with contextlib.suppress(*REDIS_ERRORS):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.hincrby(_bucket_key(start), reason, 1)
            pipe.expire(_bucket_key(start), _WINDOW_SECONDS + WINDOW_BUCKET_SECONDS)
            pipe.hincrby(TOTALS_KEY, reason, 1)
            await pipe.execute()


def recent(connection: Any, now: float | None = None) -> dict[str, int]:
    """Refusals per reason over the status window (connection: sync client, None: embedded)."""
    now = time.time() if now is None else now
    counts = dict.fromkeys(REASONS, 0)
    if connection is None:
        for at, reason in _local:
            if at >= now - _WINDOW_SECONDS:
                counts[reason] = counts.get(reason, 0) + 1
        return counts
    last = int(now) // WINDOW_BUCKET_SECONDS * WINDOW_BUCKET_SECONDS
    with connection.pipeline(transaction=False) as pipe:
        for i in range(WINDOW_BUCKETS):
            pipe.hgetall(_bucket_key(last - i * WINDOW_BUCKET_SECONDS))
        for reply in pipe.execute():
            for reason, n in reply.items():
                name = reason.decode() if isinstance(reason, bytes) else str(reason)
                counts[name] = counts.get(name, 0) + int(n)
    return counts


def totals(connection: Any) -> dict[str, int]:
    raw = connection.hgetall(TOTALS_KEY)
    return {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}

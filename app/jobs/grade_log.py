"""Queued grades counted in Redis by the workers that grade them, so that every API replica's
status page and metrics see the whole deployment's worker throughput: per (split, outcome) in the
same 10-second buckets as the in-process window, a running total per (split, grading, outcome),
and the last grader faults. Written in the pipeline that publishes the result (no extra round
trip); only labels from closed sets are stored, never text from the grade."""

from __future__ import annotations

import json
import time
from typing import Any, cast

import redis

from app.jobs.keys import PREFIX
from app.observability import FAULT_OUTCOMES, WINDOW_BUCKET_SECONDS, WINDOW_BUCKETS

TOTALS_KEY = f"{PREFIX}:grades:total"
FAULTS_KEY = f"{PREFIX}:grades:faults"
KEEP_FAULTS = 20


def bucket_key(start: int, tenant: str | None = None) -> str:
    """The deployment's bucket, or one tenant's (its status page shows its own grades only)."""
    return f"{PREFIX}:grades:window:{start}" if tenant is None else f"{PREFIX}:grades:tenant:{tenant}:{start}"


def faults_key(tenant: str | None = None) -> str:
    return FAULTS_KEY if tenant is None else f"{PREFIX}:grades:tenant-faults:{tenant}"


def count_grade(pipe: Any, split: str, grading: str, outcome: str, now: float | None = None,
                tenant: str | None = None) -> None:
    """Queue the counting commands on a pipeline the caller executes: the deployment's counts,
    and the tenant's own when it is known."""
    now = time.time() if now is None else now
    start = int(now) // WINDOW_BUCKET_SECONDS * WINDOW_BUCKET_SECONDS
    pipe.hincrby(TOTALS_KEY, f"{split}|{grading}|{outcome}", 1)
    for who in (None, tenant) if tenant else (None,):
        pipe.hincrby(bucket_key(start, who), f"{split}|{outcome}", 1)
        pipe.expire(bucket_key(start, who), WINDOW_BUCKET_SECONDS * (WINDOW_BUCKETS + 1))
        if outcome in FAULT_OUTCOMES:
            pipe.lpush(faults_key(who), json.dumps({"at": now, "kind": outcome, "where": f"{split}/{grading}"}))
            pipe.ltrim(faults_key(who), 0, KEEP_FAULTS - 1)
            if who:  # a tenant's list goes when the tenant stops grading
                pipe.expire(faults_key(who), WINDOW_BUCKET_SECONDS * WINDOW_BUCKETS)


def window(connection: redis.Redis, now: float | None = None,
           tenant: str | None = None) -> dict[int, dict[tuple[str, str], int]]:
    """Bucket start -> (split, outcome) -> grades, over the window, as GradeWindow.counts()."""
    now = time.time() if now is None else now
    last = int(now) // WINDOW_BUCKET_SECONDS * WINDOW_BUCKET_SECONDS
    starts = [last - i * WINDOW_BUCKET_SECONDS for i in range(WINDOW_BUCKETS)]
    with connection.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.hgetall(bucket_key(start, tenant))
        replies = pipe.execute()
    found = {}
    for start, reply in zip(starts, replies, strict=True):
        if reply:
            found[start] = {tuple(k.decode().split("|", 1)): int(v) for k, v in reply.items()}
    return found


def totals(connection: redis.Redis) -> dict[tuple[str, str, str], int]:
    counts = cast("dict[bytes, bytes]", connection.hgetall(TOTALS_KEY))  # no decode_responses: bytes
    # Each field is "split|grading|outcome" (count_grade writes it): three labels.
    return {cast("tuple[str, str, str]", tuple(k.decode().split("|", 2))): int(v) for k, v in counts.items()}


def faults(connection: redis.Redis, tenant: str | None = None) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in connection.lrange(faults_key(tenant), 0, KEEP_FAULTS - 1)]

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


def bucket_key(start: int) -> str:
    return f"{PREFIX}:grades:window:{start}"


def count_grade(pipe: Any, split: str, grading: str, outcome: str, now: float | None = None) -> None:
    """Queue the counting commands on a pipeline the caller executes."""
    now = time.time() if now is None else now
    start = int(now) // WINDOW_BUCKET_SECONDS * WINDOW_BUCKET_SECONDS
    pipe.hincrby(bucket_key(start), f"{split}|{outcome}", 1)
    pipe.expire(bucket_key(start), WINDOW_BUCKET_SECONDS * (WINDOW_BUCKETS + 1))
    pipe.hincrby(TOTALS_KEY, f"{split}|{grading}|{outcome}", 1)
    if outcome in FAULT_OUTCOMES:
        pipe.lpush(FAULTS_KEY, json.dumps({"at": now, "kind": outcome, "where": f"{split}/{grading}"}))
        pipe.ltrim(FAULTS_KEY, 0, KEEP_FAULTS - 1)


def window(connection: redis.Redis, now: float | None = None) -> dict[int, dict[tuple[str, str], int]]:
    """Bucket start -> (split, outcome) -> grades, over the window, as GradeWindow.counts()."""
    now = time.time() if now is None else now
    last = int(now) // WINDOW_BUCKET_SECONDS * WINDOW_BUCKET_SECONDS
    starts = [last - i * WINDOW_BUCKET_SECONDS for i in range(WINDOW_BUCKETS)]
    with connection.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.hgetall(bucket_key(start))
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


def faults(connection: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in connection.lrange(FAULTS_KEY, 0, KEEP_FAULTS - 1)]

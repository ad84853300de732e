"""The keys of the grade ledger in Redis (app.grade_ledger), and their readers: every grade of the
deployment counted in Redis, so that every API replica's status page and /metrics read the same
figures: per (split, outcome) in 10-second buckets, the deployment's and each tenant's, a running
total per (split, grading, outcome), and the last grader faults. Only labels from closed sets (and
the tenant's name) are stored, never text from the grade.

A bucket is one hash for the whole deployment, and a grade adds to one field of it: its tenant's
(``tenant|split|outcome``), or ``split|outcome`` where no tenant is known. The deployment's
figures are the sum over the fields, read with the bucket: one counting command per grade, not
one for the deployment's bucket and another for the tenant's.

Two writers, one set of keys. A worker counts a queued grade in the script that writes its result
(app.jobs.leases: no extra round trip, and a grade is counted if and only if its result was
written). An API process counts its inline grades through app.jobs.redis_ledger."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import redis

from app.grade_ledger import (
    FAULT_OUTCOMES,
    KEEP_FAULTS,
    WINDOW_BUCKET_SECONDS,
    WINDOW_BUCKETS,
    Labels,
    Window,
    bucket_start,
)
from app.jobs.keys import PREFIX

TOTALS_KEY = f"{PREFIX}:grades:total"
FAULTS_KEY = f"{PREFIX}:grades:faults"
WINDOW_SECONDS = WINDOW_BUCKET_SECONDS * WINDOW_BUCKETS


def bucket_key(start: int) -> str:
    return f"{PREFIX}:grades:window:{start}"


def bucket_field(split: str, outcome: str, tenant: str | None = None) -> str:
    """A grade's field of its bucket (split and outcome hold no ``|``; a tenant's name may)."""
    return f"{split}|{outcome}" if not tenant else f"{tenant}|{split}|{outcome}"


def faults_key(tenant: str | None = None) -> str:
    return FAULTS_KEY if tenant is None else f"{PREFIX}:grades:tenant-faults:{tenant}"


@dataclass(frozen=True)
class GradeCount:
    """What one grade adds to the counts: a field of the running totals, and one field of its
    10-second bucket (its tenant's, when known)."""

    total_field: str
    buckets: tuple[tuple[str, str], ...]  # (bucket key, field)
    bucket_ttl: int = WINDOW_BUCKET_SECONDS * (WINDOW_BUCKETS + 1)


def grade_count(split: str, grading: str, outcome: str, now: float | None = None,
                tenant: str | None = None) -> GradeCount:
    start = bucket_start(time.time() if now is None else now)
    return GradeCount(f"{split}|{grading}|{outcome}", ((bucket_key(start), bucket_field(split, outcome, tenant)),))


def count_grade(pipe: Any, split: str, grading: str, outcome: str, now: float | None = None,
                tenant: str | None = None) -> None:
    """Queue the counting commands on a pipeline the caller executes. (A worker counts in the
    script that writes the result instead, app.jobs.leases, and records faults with
    ``note_fault``.)"""
    count = grade_count(split, grading, outcome, now, tenant)
    pipe.hincrby(TOTALS_KEY, count.total_field, 1)
    for key, field in count.buckets:
        pipe.hincrby(key, field, 1)
        pipe.expire(key, count.bucket_ttl)
    note_fault(pipe, split, grading, outcome, now, tenant)


def note_fault(pipe: Any, split: str, grading: str, outcome: str, now: float | None = None,
               tenant: str | None = None) -> None:
    """The last grader faults (only fault outcomes are kept), the deployment's and the tenant's."""
    if outcome not in FAULT_OUTCOMES:
        return
    now = time.time() if now is None else now
    for who in (None, tenant) if tenant else (None,):
        pipe.lpush(faults_key(who), json.dumps({"at": now, "kind": outcome, "where": f"{split}/{grading}"}))
        pipe.ltrim(faults_key(who), 0, KEEP_FAULTS - 1)
        if who:  # a tenant's list goes when the tenant stops grading
            pipe.expire(faults_key(who), WINDOW_SECONDS)


def window(connection: redis.Redis, now: float | None = None, tenant: str | None = None) -> Window:
    """Bucket start -> (split, outcome) -> grades, over the window, as GradeWindow.counts(): the
    deployment's (every field), or one tenant's (its fields only; its status page shows its own)."""
    last = bucket_start(time.time() if now is None else now)
    starts = [last - i * WINDOW_BUCKET_SECONDS for i in range(WINDOW_BUCKETS)]
    with connection.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.hgetall(bucket_key(start))
        replies = pipe.execute()
    found: Window = {}
    for start, reply in zip(starts, replies, strict=True):
        counts: dict[tuple[str, str], int] = {}
        for raw, n in reply.items():
            *who, split, outcome = raw.decode().rsplit("|", 2)
            if tenant is None or who == [tenant]:
                counts[split, outcome] = counts.get((split, outcome), 0) + int(n)
        if counts:
            found[start] = counts
    return found


def totals(connection: redis.Redis) -> dict[Labels, int]:
    counts = cast("dict[bytes, bytes]", connection.hgetall(TOTALS_KEY))  # no decode_responses: bytes
    # Each field is "split|grading|outcome" (grade_count makes it): three labels.
    return {cast("Labels", tuple(k.decode().split("|", 2))): int(v) for k, v in counts.items()}


def faults(connection: redis.Redis, tenant: str | None = None) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in connection.lrange(faults_key(tenant), 0, KEEP_FAULTS - 1)]

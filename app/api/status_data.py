"""The figures of the status page, gathered from what the service already knows: the readiness
checks, the split banks, RQ's registries and the grade ledger (app.grade_ledger: in Redis mode
the whole deployment's grades, inline and queued, the same on every API replica and process; in
embedded mode this process's). Only labels, counts and ids: never a completion, a reference
answer or a hidden case.

The operator sees the whole deployment. A tenant sees the splits, whether the service is ready,
and its own grades and grader faults only: no other tenant's activity, no workers (their hosts,
pids and current job ids), no queues, no readiness internals."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import anyio
import redis
from fastapi import Request

from app import __version__
from app.api import health
from app.api.auth import is_operator, tenant_of
from app.api.deps import settings_of
from app.grade_ledger import KEEP_FAULTS, WINDOW_BUCKET_SECONDS, WINDOW_BUCKETS, Window, ledger
from app.jobs import grade_log, refusals
from app.jobs.redis_jobs import REDIS_ERRORS, sync_connection
from app.jobs.worker_registry import live_workers, queue_depths
from app.settings import Settings
from app.tasks.book.source import BookSourceError
from app.tasks.registry import get_bank, split_names


def _splits(settings: Settings) -> list[dict[str, Any]]:
    rows = []
    for name in split_names():
        try:
            info = get_bank(name, settings).info()
            rows.append({"name": name, "size": info.get("size"), "grading": info.get("grading", {}),
                         "available": True})
        except BookSourceError:  # one split without its source must not hide the others
            rows.append({"name": name, "size": None, "grading": {}, "available": False})
    return rows


def _grades(window: Window, now: float) -> dict[str, Any]:
    """Per-bucket counts for the chart (oldest first, empty buckets included) and totals per
    split and outcome over the window."""
    last = int(now) // WINDOW_BUCKET_SECONDS * WINDOW_BUCKET_SECONDS
    starts = [last - i * WINDOW_BUCKET_SECONDS for i in reversed(range(WINDOW_BUCKETS))]
    buckets = []
    totals: dict[str, dict[str, int]] = {}
    for start in starts:
        counts = window.get(start, {})
        by_outcome: dict[str, int] = {}
        for (split, outcome), n in counts.items():
            by_outcome[outcome] = by_outcome.get(outcome, 0) + n
            row = totals.setdefault(split, {})
            row[outcome] = row.get(outcome, 0) + n
        buckets.append({"start": start, "by_outcome": by_outcome})
    return {"bucket_seconds": WINDOW_BUCKET_SECONDS, "window_seconds": WINDOW_BUCKET_SECONDS * WINDOW_BUCKETS,
            "buckets": buckets, "by_split": totals}


def _redis_side(connection: redis.Redis, tenant: str | None) -> dict[str, Any]:
    """The deployment's side (``tenant`` None, for the operator), or one tenant's own counts."""
    # This process's pending counts are part of the figures; if they cannot be written now they
    # wait for the ledger's next write, and the figures are read all the same.
    with contextlib.suppress(redis.RedisError, *REDIS_ERRORS):
        ledger().flush()
    try:
        if tenant is not None:
            return {"workers": [], "queues": {}, "window": grade_log.window(connection, tenant=tenant),
                    "faults": grade_log.faults(connection, tenant), "error": None}
        return {"workers": live_workers(connection), "queues": queue_depths(connection),
                "window": grade_log.window(connection), "faults": grade_log.faults(connection), "error": None,
                "refused": refusals.recent(connection)}
    except REDIS_ERRORS as exc:
        return {"workers": [], "queues": {}, "window": {}, "faults": [],
                "error": f"Redis is unreachable ({type(exc).__name__})"}


def status_connection(request: Request) -> redis.Redis | None:
    """A synchronous Redis client of the status page's own, made once per app."""
    settings = settings_of(request)
    if not settings.redis_url:
        return None
    connection = getattr(request.app.state, "status_redis", None)
    if connection is None:
        connection = request.app.state.status_redis = sync_connection(settings.redis_url)
    return connection


async def collect_status(request: Request) -> dict[str, Any]:
    settings = settings_of(request)
    operator = is_operator(request)
    tenant = None if operator else tenant_of(request).name
    readiness = json.loads(bytes((await health.readyz(request)).body))  # Starlette types body as bytes | memoryview
    splits = await anyio.to_thread.run_sync(_splits, settings)
    connection = status_connection(request)
    now = time.time()
    side: dict[str, Any]
    if connection is None:  # embedded: one process, its ledger in memory
        book = ledger()
        side = {"workers": None, "queues": None, "window": book.window(tenant, now), "faults": book.faults(tenant),
                "error": None}
    else:
        side = await anyio.to_thread.run_sync(_redis_side, connection, tenant)
    return {
        "version": __version__,
        "mode": "redis" if settings.redis_url else "embedded",
        "view": "operator" if operator else "tenant",
        "generated_at": now,
        "ready": readiness["ready"],
        "checks": readiness.get("checks", {}),
        "splits": splits,
        "workers": side["workers"] if operator else None,
        "queues": side["queues"] if operator else None,
        "redis_error": side["error"] if operator else None,
        "grades": _grades(side["window"], now),
        "faults": side["faults"][:KEEP_FAULTS],
        # the deployment's 429s, every tenant's: the operator's (a tenant sees its own activity only)
        "refused": (side.get("refused") or refusals.recent(None, now)) if operator else None,
    }

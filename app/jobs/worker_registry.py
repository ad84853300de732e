"""What the status page shows of the Redis side: the workers RQ has registered (with the sandbox
tier each one probed and the job it holds) and the depth of each grading queue.

Everything is read from RQ's own registries; the one thing RQ does not know, a worker's sandbox
tier, is an extra field of RQ's worker hash, so it lives and dies with the worker's registration."""

from __future__ import annotations

import time
from typing import Any, cast

import redis
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.serializers import JSONSerializer
from rq.worker import BaseWorker

from app.graders.kinds import queue_names

TIER_FIELD = "sandbox_tier"


def record_sandbox_tier(connection: redis.Redis, worker_key: str, tier: str) -> None:
    """Called by a worker right after RQ registered it (registration rewrites the hash)."""
    connection.hset(worker_key, TIER_FIELD, tier)


def _timestamp(value: Any) -> float | None:
    return value.timestamp() if value is not None else None


def _current_job(worker: BaseWorker) -> dict[str, Any] | None:
    job_id = worker.get_current_job_id()
    if job_id is None:
        return None
    try:
        job = worker.get_current_job()
    except NoSuchJobError:  # finished and expired between the two reads
        return {"id": job_id, "kind": None, "running_seconds": None}
    started = _timestamp(getattr(job, "started_at", None)) if job is not None else None
    return {"id": job_id, "kind": getattr(job, "origin", None),
            "running_seconds": None if started is None else round(max(0.0, time.time() - started), 1)}


def live_workers(connection: redis.Redis) -> list[dict[str, Any]]:
    """One row per registered worker, sorted by name: its state, queues, sandbox tier, and the
    kind and age of the job it is running. Job ids only: payloads hold candidate text."""
    rows = []
    for worker in Worker.all(connection=connection, serializer=JSONSerializer):
        tier = cast("bytes | None", connection.hget(worker.key, TIER_FIELD))  # no decode_responses: bytes
        rows.append({
            "name": worker.name,
            "hostname": worker.hostname,
            "pid": worker.pid,
            "state": str(worker.get_state()),
            "queues": worker.queue_names(),
            "sandbox_tier": tier.decode() if tier else None,
            "current_job": _current_job(worker),
            "last_heartbeat": _timestamp(worker.last_heartbeat),
            "successful_jobs": worker.successful_job_count,
            "failed_jobs": worker.failed_job_count,
        })
    return sorted(rows, key=lambda row: row["name"])


def queue_depths(connection: redis.Redis) -> dict[str, dict[str, Any]]:
    """Queue name -> jobs waiting, running, and failed (still kept for inspection), and how long
    the job at the head of the queue has waited (seconds; None when the queue is empty)."""
    depths = {}
    for name in queue_names():  # ours only: a shared Redis may hold other applications' queues
        queue = Queue(name, connection=connection, serializer=JSONSerializer)
        # (no cleanup: RQ's would re-queue an abandoned job itself, leaving the records of its dead
        # execution, which the lanes' maintenance deletes when it re-queues it: worker.grading_worker)
        started = queue.started_job_registry.get_job_count(cleanup=False)
        depths[name] = {"queued": queue.count, "started": started,
                        "failed": queue.failed_job_registry.count, "oldest_seconds": _head_age(queue)}
    return depths


def _head_age(queue: Queue) -> float | None:
    """Age of the next job out (the head: re-runs are put there, so it may not be the oldest
    enqueued; a backlog's age shows within one job)."""
    head = queue.get_job_ids(0, 1)
    if not head:
        return None
    job = queue.fetch_job(head[0])
    enqueued = getattr(job, "enqueued_at", None) if job is not None else None
    return None if enqueued is None else round(max(0.0, time.time() - enqueued.timestamp()), 1)

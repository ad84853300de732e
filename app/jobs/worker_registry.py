"""What the status page shows of the Redis side: the workers RQ has registered (with the sandbox
tier each one probed and the job it holds) and the depth of each grading queue.

Everything is read from RQ's own registries and records; the one thing RQ does not know, a
worker's sandbox tier, is an extra field of RQ's worker hash, so it lives and dies with the
worker's registration."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, cast

import redis
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import BaseWorker

from app.graders.kinds import queue_names

TIER_FIELD = "sandbox_tier"


def record_sandbox_tier(connection: redis.Redis, worker_key: str, tier: str) -> None:
    """Called by a worker right after RQ registered it (registration rewrites the hash)."""
    connection.hset(worker_key, TIER_FIELD, tier)


def _timestamp(value: Any) -> float | None:
    return value.timestamp() if value is not None else None


def running_jobs(connection: redis.Redis, queues: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Worker name -> the job it is running: each of our queues' StartedJobRegistry (no cleanup:
    see queue_depths) and the job's own record, which names its worker. The lanes do not write
    RQ's per-execution records, which RQ's own tools read for this (app.jobs.rq_bookkeeping).
    A worker with two entries (an abandoned one not yet re-queued) shows the later start."""
    running: dict[str, dict[str, Any]] = {}
    started_at: dict[str, float] = {}  # worker -> its row's start, to keep the later of two
    now_ = time.time()
    for name in queue_names() if queues is None else queues:
        queue = Queue(name, connection=connection, serializer=JSONSerializer)
        for job_id in queue.started_job_registry.get_job_ids(cleanup=False):
            try:
                # not Queue.fetch_job: on a record gone it removes the id from the queue (LREM)
                job = Job.fetch(job_id, connection=connection, serializer=JSONSerializer)
            except NoSuchJobError:  # it finished and its record went
                continue
            if job.origin != name or not job.worker_name or job.get_status(refresh=False) != "started":
                continue
            started = _timestamp(job.started_at)
            if job.worker_name in running and started_at[job.worker_name] >= (started or 0):
                continue
            started_at[job.worker_name] = started or 0
            running[job.worker_name] = {
                "id": job.id, "kind": job.origin,
                "running_seconds": None if started is None else round(max(0.0, now_ - started), 1)}
    return running


def worker_state(worker: BaseWorker, running: dict[str, dict[str, Any]]) -> str:
    """``busy`` while the worker runs a job (running_jobs), else the state RQ holds for it: the
    lanes do not write ``busy`` and ``idle`` around each job (app.jobs.rq_bookkeeping)."""
    return "busy" if worker.name in running else str(worker.get_state())


def live_workers(connection: redis.Redis) -> list[dict[str, Any]]:
    """One row per registered worker, sorted by name: its state, queues, sandbox tier, and the
    kind and age of the job it is running. Job ids only: payloads hold candidate text."""
    rows = []
    running = running_jobs(connection)
    for worker in Worker.all(connection=connection, serializer=JSONSerializer):
        tier = cast("bytes | None", connection.hget(worker.key, TIER_FIELD))  # no decode_responses: bytes
        rows.append({
            "name": worker.name,
            "hostname": worker.hostname,
            "pid": worker.pid,
            "state": worker_state(worker, running),
            "queues": worker.queue_names(),
            "sandbox_tier": tier.decode() if tier else None,
            "current_job": running.get(worker.name),
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

"""RQ's enqueue of one job in two Redis commands, through RQ's public API.

``Queue.enqueue_many`` (and ``enqueue_call``) send four for a job without dependencies: the
queue's registration in RQ's set of queues (an SADD), the job's status (an HSET), the job's
record (an HSET that holds the status again) and the push. Here: the record, with its status,
and the push (``Job.save`` and ``Queue.push_job_id``), as ``Queue._prepare_for_queue`` would fill
it in. The registration is what ``rq info`` and ``Queue.all`` list queues by (RQ's workers serve
the queues they are given); it is sent with the first job of each queue a process enqueues and
again every REGISTER_EVERY_SECONDS, so a Redis that lost its data lists the queue again within
minutes. tests/jobs/test_rq_contract.py checks that the record is RQ's own, field for field."""

from __future__ import annotations

import time
from typing import Any

from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.utils import now

REGISTER_EVERY_SECONDS = 300.0


class LeanEnqueue:
    """Enqueues on a queue in two commands a job (one more, now and then, for its registration)."""

    def __init__(self) -> None:
        self._registered_at: dict[str, float] = {}  # queue key -> when this process last registered it

    def enqueue(self, queue: Queue, **job_arguments: Any) -> Job:
        """The job ``queue.create_job(**job_arguments)`` makes (a ``timeout`` among them), queued at
        the back of ``queue`` in one round trip without a transaction."""
        job = queue.create_job(status=JobStatus.QUEUED, **job_arguments)
        # what Queue._prepare_for_queue sets before RQ saves a job it enqueues (the server's
        # version read once per queue object: Job.save would otherwise read it for every job)
        job.redis_server_version = queue.get_redis_server_version()
        job.origin = queue.name
        job.enqueued_at = now()
        clock = time.monotonic()
        register = clock - self._registered_at.get(queue.key, float("-inf")) >= REGISTER_EVERY_SECONDS
        with queue.connection.pipeline(transaction=False) as pipeline:
            if register:
                pipeline.sadd(queue.redis_queues_keys, queue.key)
            job.save(pipeline=pipeline)
            queue.push_job_id(job.id, pipeline=pipeline)
            pipeline.execute()
        if register:
            self._registered_at[queue.key] = clock
        return job

"""RQ job functions: importable, module-level, JSON-safe arguments and results."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rq import get_current_job

from app.grade_ledger import FAULT_OUTCOMES, counted_on_publish
from app.grading.service import GradingService
from app.jobs import worker_health
from app.jobs.case_secret import with_deployment_secret
from app.jobs.grade_log import grade_count, note_fault
from app.jobs.leases import RESULT_EXISTS, TAKEN_ELSEWHERE, Lease, held, new_token
from app.redis_link import REDIS_ERRORS
from app.settings import Settings, get_settings

log = logging.getLogger(__name__)
T = TypeVar("T")
_LONGEST_PAUSE = 5.0  # between tries while Redis is unreachable or another attempt holds the job


def _reaching_redis(call: Callable[[], T]) -> T:
    """Call until Redis answers: a short outage is ridden out, not turned into a failed job (which
    RQ would re-queue while this attempt still holds it). The job's backstop deadline bounds it."""
    pause = 0.2
    while True:
        try:
            return call()
        except REDIS_ERRORS as exc:
            log.warning("Redis unreachable (%s); retrying in %.1f s", type(exc).__name__, pause)
            time.sleep(pause)
            pause = min(pause * 2, _LONGEST_PAUSE)


def _wait_while_held_elsewhere(attempt: Callable[[], int], pause: float) -> int:
    """Another attempt holds the job (its worker was thought dead but is not): run nothing beside
    it; wait until it writes the result (0) or lets its lease lapse (the call succeeds)."""
    while (outcome := _reaching_redis(attempt)) == TAKEN_ELSEWHERE:
        time.sleep(pause)
    return outcome


def grade_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Grade one queued request and publish its result under the job's result key, once: a later
    attempt of the same job (re-queued after its worker looked dead) neither overwrites nor
    re-counts it. Hidden cases come from the deployment's one case secret, so any attempt on any
    worker would grade alike."""
    settings = get_settings()
    job = get_current_job()
    if job is None:  # called directly (tests, tools): nothing to hold or publish
        return GradingService(settings).run_job(payload).model_dump(mode="json")
    connection = job.connection
    lease = held() or Lease(connection, job.id, new_token("job"), _lease_ms(settings),
                            registry=job.started_job_registry.key)
    pause = min(settings.queue.heartbeat_interval, _LONGEST_PAUSE)
    ttl = settings.queue.result_ttl
    try:
        attempt = _wait_while_held_elsewhere(lambda: lease.take(ttl), pause)
        if attempt == RESULT_EXISTS:
            return {"job_id": job.id, "already_graded": True}
        shared = _reaching_redis(lambda: with_deployment_secret(settings, connection))
        with counted_on_publish() as counted:  # counted with the result's write below, exactly once
            result = GradingService(shared).run_job(payload)
        if result.grading == "impl":
            worker_health.note_impl_outcome(result.outcome.value)
        result.details["attempt"] = attempt  # >1 when a worker looked dead holding this job and it was re-run
        result.job_id = job.id
        text = result.model_dump_json()
        tenant = str(payload.get("tenant", ""))
        # the labels the grading code counts with, as an inline grade's are
        labels = counted[-1] if counted else (result.split or "inline", result.grading, result.outcome.value)
        count = grade_count(*labels, tenant=tenant or None)
        written = _wait_while_held_elsewhere(lambda: lease.publish(text, tenant, ttl, count), pause)
        if written == 1:  # the lease is left to lapse (a later attempt finds the result first)
            lease.taken = False
            _reaching_redis(lambda: _note_fault(connection, labels, tenant or None))
    finally:
        if lease.taken:
            with contextlib.suppress(*REDIS_ERRORS):  # else it lapses by itself
                lease.release()
    return {"job_id": job.id, "written": written == 1}


def _note_fault(connection: Any, labels: tuple[str, str, str], tenant: str | None) -> None:
    """Grader faults are kept apart from the counts (only faults: no command for other grades)."""
    if labels[2] not in FAULT_OUTCOMES:
        return
    with connection.pipeline(transaction=False) as pipe:
        note_fault(pipe, *labels, tenant=tenant)
        pipe.execute()


def _lease_ms(settings: Settings) -> int:
    """A lease no heartbeat keeps (grade_job run by a worker that sends none): as long as a
    lane's heartbeat TTL (worker.grading_worker)."""
    return 1000 * (max(1, math.ceil(settings.queue.heartbeat_interval)) + settings.queue.heartbeat_grace)

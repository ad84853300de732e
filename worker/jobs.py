"""RQ job functions: importable, module-level, JSON-safe arguments and results."""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from app.grading.service import GradingService
from app.jobs import keys
from app.jobs.grade_log import count_grade
from app.settings import get_settings


def grade_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Grade one queued request and publish the result under the job's result key. Grading is
    deterministic, so a job re-run after its worker died writes the same result again."""
    settings = get_settings()
    job = get_current_job()
    attempt = int(job.connection.incr(keys.attempts(job.id))) if job is not None else 1
    result = GradingService(settings).run_job(payload)
    result.details["attempt"] = attempt  # >1 when a worker died holding this job and it was re-run
    if job is not None:
        result.job_id = job.id
        with job.connection.pipeline() as pipe:
            pipe.expire(keys.attempts(job.id), settings.queue.result_ttl)
            pipe.set(keys.result(job.id), result.model_dump_json(), ex=settings.queue.result_ttl)
            pipe.zrem(keys.in_flight(payload.get("tenant", "")), job.id)
            count_grade(pipe, result.split or "inline", result.grading, result.outcome.value,
                        tenant=payload.get("tenant") or None)
            pipe.execute()
    return result.model_dump(mode="json")

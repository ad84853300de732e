"""RQ job functions: importable, module-level, JSON-safe arguments and results."""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from app.jobs import keys
from app.jobs.execute import run_payload
from app.settings import get_settings


def grade_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Grade one queued request and publish the result under the job's result key. Grading is
    deterministic, so a job re-run after its worker died writes the same result again."""
    settings = get_settings()
    result = run_payload(payload, settings)
    job = get_current_job()
    if job is not None:
        result.job_id = job.id
        with job.connection.pipeline() as pipe:
            pipe.set(keys.result(job.id), result.model_dump_json(), ex=settings.queue.result_ttl)
            pipe.zrem(keys.in_flight(payload.get("tenant", "")), job.id)
            pipe.execute()
    return result.model_dump(mode="json")

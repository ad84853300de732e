"""Running one queued grading: the same code in a worker process and in an embedded thread."""

from __future__ import annotations

from typing import Any

from app.grading.models import GradeRequest
from app.graders.result import GradeResult
from app.settings import Settings


def job_payload(request: GradeRequest, tenant: str) -> dict[str, Any]:
    """JSON-safe job arguments: the request as sent (validated), and who sent it."""
    return {"request": request.model_dump(mode="json", exclude={"request_id", "wait"}), "tenant": tenant}


def run_payload(payload: dict[str, Any], settings: Settings) -> GradeResult:
    from app.grading.service import GradingService

    service = GradingService(settings)
    request = GradeRequest.model_validate(payload["request"])
    task, text = service.prepare(request)
    return service.grade_now(task, text, request)

"""Grading endpoints. Responses are serialised by pydantic directly (the hot path of an RL run)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.api.deps import GradingDep, SettingsDep
from app.api.errors import ApiError
from app.api.schemas import GradeBatchRequest, GradeRequest
from app.graders.result import GradeResult

router = APIRouter(prefix="/v1", tags=["grade"])


def _json(payload: str) -> Response:
    return Response(content=payload, media_type="application/json")


@router.post("/grade", response_model=GradeResult)
async def grade(request: GradeRequest, grading: GradingDep) -> Response:
    result = await grading.grade(request)
    return _json(result.model_dump_json())


@router.post("/grade/batch")
async def grade_batch(batch: GradeBatchRequest, grading: GradingDep, settings: SettingsDep) -> Response:
    if len(batch.items) > settings.limits.max_grades_per_batch:
        raise ApiError(422, "invalid_request", f"at most {settings.limits.max_grades_per_batch} items per batch")
    results = await grading.grade_many(batch.items)
    return _json('{"results":[' + ",".join(r.model_dump_json() for r in results) + "]}")

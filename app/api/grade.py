"""Grading endpoints: the hot path of an RL run.

Ordinary FastAPI path operations that read their body themselves (``parse_body``: pydantic
straight from the raw bytes, a large body on a grading thread) and write their results with
pydantic directly; the decorators document both."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from app.api.auth import charge_grades, tenant_of
from app.api.bodies import RequestRoute, json_body, parse_body
from app.api.deps import grading_of, settings_of
from app.errors import ApiError, JobPending
from app.graders.result import GradeResult
from app.grading.models import GradeBatchRequest, GradeRequest
from app.grading.offload import off_loop

PREFIX = "/v1"
# Results serialised on the event loop; a larger batch's response is written on a grading thread.
ON_LOOP_RESULTS = 8
QUEUED: dict[int | str, dict[str, Any]] = {
    202: {"description": "queued work still running after `wait`: {job_id, status, poll}"}}

router = APIRouter(tags=["grade"], route_class=RequestRoute)


class GradeBatchResponse(BaseModel):
    results: list[GradeResult]


def _json(payload: str) -> Response:
    return Response(content=payload, media_type="application/json")


def pending_json(pending: JobPending) -> str:
    return json.dumps({"job_id": pending.job_id, "status": pending.status, "poll": f"{PREFIX}/jobs/{pending.job_id}"})


@router.post(f"{PREFIX}/grade", summary="Grade one completion", response_model=GradeResult,
             response_description="the verdict", responses=QUEUED, openapi_extra=json_body(GradeRequest))
async def grade(request: Request) -> Response:
    body = await parse_body(request, GradeRequest)
    try:
        result = await grading_of(request).grade(body, tenant_of(request))
    except JobPending as pending:
        return Response(pending_json(pending), status_code=202, media_type="application/json")
    return _json(result.model_dump_json())


@router.post(f"{PREFIX}/grade/batch", summary="Grade a batch, results in order", response_model=GradeBatchResponse,
             response_description="the verdicts, in order", responses=QUEUED,
             openapi_extra=json_body(GradeBatchRequest))
async def grade_batch(request: Request) -> Response:
    batch = await parse_body(request, GradeBatchRequest)
    limit = settings_of(request).limits.max_grades_per_batch
    if len(batch.items) > limit:
        raise ApiError(422, "invalid_request", f"at most {limit} items per batch")
    await charge_grades(request, len(batch.items))
    results = await grading_of(request).grade_many(batch.items, tenant_of(request))

    def body() -> str:
        parts = [pending_json(r) if isinstance(r, JobPending) else r.model_dump_json() for r in results]
        return '{"results":[' + ",".join(parts) + "]}"

    # Results carry evidence (a rows answer's diffs): writing hundreds of them is grading-sized work.
    return _json(body() if len(results) <= ON_LOOP_RESULTS else await off_loop(body, tenant=tenant_of(request).name))


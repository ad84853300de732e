"""Grading endpoints: the hot path of an RL run.

They are plain Starlette routes (see app/api/plain.py): FastAPI's per-request parameter machinery
cost more than grading a numeric answer (measured: about a third of each request), so the body
is validated by pydantic straight from the raw bytes and the result serialised by pydantic
directly. OpenAPI still documents both (see ``openapi_paths``)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel

from app.api.auth import charge_grades, tenant_of
from app.api.deps import grading_of, settings_of
from app.api.plain import NamedRoute, OperationDocs, parse_body
from app.errors import ApiError, JobPending
from app.graders.result import GradeResult
from app.grading.models import GradeBatchRequest, GradeRequest
from app.grading.offload import off_loop

PREFIX = "/v1"
# Results serialised on the event loop; a larger batch's response is written on a grading thread.
ON_LOOP_RESULTS = 8


def _json(payload: str) -> Response:
    return Response(content=payload, media_type="application/json")


def pending_json(pending: JobPending) -> str:
    return json.dumps({"job_id": pending.job_id, "status": pending.status, "poll": f"{PREFIX}/jobs/{pending.job_id}"})


async def grade(request: Request) -> Response:
    body = await parse_body(request, GradeRequest)
    try:
        result = await grading_of(request).grade(body, tenant_of(request))
    except JobPending as pending:
        return Response(pending_json(pending), status_code=202, media_type="application/json")
    return _json(result.model_dump_json())


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


# Added to the application's own router (see main.py), ahead of the included routers: a route
# inside an included router costs an extra dispatch step per request.
ROUTES = [
    NamedRoute(f"{PREFIX}/grade", grade, methods=["POST"], include_in_schema=False),
    NamedRoute(f"{PREFIX}/grade/batch", grade_batch, methods=["POST"], include_in_schema=False),
]


class GradeBatchResponse(BaseModel):
    results: list[GradeResult]


def openapi_paths() -> tuple[dict[str, Any], dict[str, Any]]:
    """(paths, component schemas) documenting the two routes above."""
    docs = OperationDocs()
    queued = {"202": {"description": "queued work still running after `wait`: {job_id, status, poll}"}}
    docs.post(f"{PREFIX}/grade", tag="grade", summary="Grade one completion", body=GradeRequest,
              response=GradeResult, ok="the verdict", extra=queued)
    docs.post(f"{PREFIX}/grade/batch", tag="grade", summary="Grade a batch, results in order",
              body=GradeBatchRequest, response=GradeBatchResponse, ok="the verdicts, in order", extra=queued)
    return docs.paths, docs.schemas

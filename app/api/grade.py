"""Grading endpoints: the hot path of an RL run.

They are plain Starlette routes inside this router: FastAPI's per-request parameter machinery
cost more than grading a numeric answer (measured: about a third of each request), so the body
is validated by pydantic straight from the raw bytes and the result serialised by pydantic
directly. OpenAPI still documents both (see ``openapi_paths``)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.routing import Match, Route

from app.api.auth import tenant_of
from app.api.errors import ApiError, describe_validation_errors
from app.api.schemas import GradeBatchRequest, GradeRequest
from app.errors import JobPending
from app.graders.result import GradeResult

PREFIX = "/v1"
M = TypeVar("M", bound=BaseModel)


async def parse_body(request: Request, model: type[M]) -> M:
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        status, error, detail = describe_validation_errors(list(exc.errors(include_input=False)), located=False)
        raise ApiError(status, error, detail) from None


def _json(payload: str) -> Response:
    return Response(content=payload, media_type="application/json")


def pending_json(pending: JobPending) -> str:
    return json.dumps({"job_id": pending.job_id, "status": pending.status, "poll": f"{PREFIX}/jobs/{pending.job_id}"})


async def grade(request: Request) -> Response:
    body = await parse_body(request, GradeRequest)
    try:
        result = await request.app.state.grading.grade(body, tenant_of(request))
    except JobPending as pending:
        return Response(pending_json(pending), status_code=202, media_type="application/json")
    return _json(result.model_dump_json())


async def grade_batch(request: Request) -> Response:
    batch = await parse_body(request, GradeBatchRequest)
    limit = request.app.state.settings.limits.max_grades_per_batch
    if len(batch.items) > limit:
        raise ApiError(422, "invalid_request", f"at most {limit} items per batch")
    results = await request.app.state.grading.grade_many(batch.items, tenant_of(request))
    parts = [pending_json(r) if isinstance(r, JobPending) else r.model_dump_json() for r in results]
    return _json('{"results":[' + ",".join(parts) + "]}")


class NamedRoute(Route):
    """A plain route that puts itself in the scope, as FastAPI's routes do: the metrics label a
    request by ``scope["route"].path``, and without it these requests counted as unmatched."""

    def matches(self, scope: dict[str, Any]) -> tuple[Match, dict[str, Any]]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


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
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict[str, str]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def operation(summary: str, body: type[BaseModel], response: type[BaseModel]) -> dict[str, Any]:
        return {"post": {
            "tags": ["grade"], "summary": summary,
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref(body)}}},
            "responses": {
                "200": {"description": "the verdict", "content": {"application/json": {"schema": ref(response)}}},
                "202": {"description": "queued work still running after `wait`: {job_id, status, poll}"},
                "4XX": {"description": "refused: {error, detail}"},
            },
        }}

    paths = {
        f"{PREFIX}/grade": operation("Grade one completion", GradeRequest, GradeResult),
        f"{PREFIX}/grade/batch": operation("Grade a batch, results in order", GradeBatchRequest, GradeBatchResponse),
    }
    return paths, schemas

"""What the hot-path endpoints share: they are plain Starlette routes (FastAPI's per-request
parameter handling cost more than grading a numeric answer), so they validate their bodies with
pydantic straight from the bytes, put themselves in the scope for the metrics, and describe
themselves to OpenAPI by hand."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.routing import Match, Route
from starlette.types import Scope

from app.api.errors import describe_validation_errors
from app.errors import ApiError

M = TypeVar("M", bound=BaseModel)


async def parse_body(request: Request, model: type[M]) -> M:
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        status, error, detail = describe_validation_errors(list(exc.errors(include_input=False)), located=False)
        raise ApiError(status, error, detail) from None


class NamedRoute(Route):
    """A plain route that puts itself in the scope, as FastAPI's routes do: the metrics label a
    request by ``scope["route"].path``, and without it these requests counted as unmatched."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


class OperationDocs:
    """OpenAPI operations for plain routes, and the component schemas they reference."""

    def __init__(self) -> None:
        self.paths: dict[str, Any] = {}
        self.schemas: dict[str, Any] = {}

    def _json_body(self, model: type[BaseModel]) -> dict[str, Any]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        self.schemas.update(schema.pop("$defs", {}))
        self.schemas[model.__name__] = schema
        return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}

    def post(self, path: str, *, tag: str, summary: str, body: type[BaseModel], response: type[BaseModel],
             ok: str, extra: dict[str, Any] | None = None) -> None:
        responses = {"200": {"description": ok, **self._json_body(response)}, **(extra or {}),
                     "4XX": {"description": "refused: {error, detail}"}}
        self.paths[path] = {"post": {"tags": [tag], "summary": summary,
                                     "requestBody": {"required": True, **self._json_body(body)},
                                     "responses": responses}}

"""Errors to clients: short, typed, and never an echo of what was sent. FastAPI's default 422
body repeats the offending input (which may be a completion or submitted code); ours names the
field and the rule only."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import ApiError
from app.tasks.book.source import BookSourceError

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    error: str
    detail: str
    kind: Literal["error"] = "error"


def error_response(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


# A location names fields of our schema, or keys the client invented (an unknown field): those are
# client text, so anything that is not a short identifier is not repeated back.
_SAFE_PART = re.compile(r"^(?![A-Za-z_][A-Za-z0-9_]{0,39}$).*", re.DOTALL)


def _location(loc: tuple[object, ...], located: bool) -> str:
    # FastAPI prefixes each location with where it came from; a body we validate ourselves does
    # not, and there "query" is a field name (OpenRLHF's) that must stay in the message.
    if located and loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        loc = loc[1:]
    return ".".join(_SAFE_PART.sub("?", str(p)) if isinstance(p, str) else str(p) for p in loc) or "body"


def describe_validation_errors(errors: Sequence[Mapping[str, Any]], *, located: bool = True) -> tuple[int, str, str]:
    """(status, error, detail) for pydantic errors; ``located`` when FastAPI prefixed the
    locations with "body", "query" or "path"."""
    first = errors[0] if errors else {}
    kind = str(first.get("type", ""))
    if kind == "json_invalid":
        return 400, "malformed_json", "the request body is not valid JSON (UTF-8)"
    if kind == "missing" and tuple(first.get("loc", ())) == ("body",):
        return 400, "missing_body", "a JSON body is required"
    messages = []
    for e in errors[:5]:
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        messages.append(f"{_location(tuple(e.get('loc', ())), located)}: {msg}")
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "invalid_request", "; ".join(messages)[:500] + more


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.error, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, error, detail = describe_validation_errors(list(exc.errors()))
        return error_response(status, error, detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "payload_too_large"}
        error = names.get(exc.status_code, "http_error")
        detail = str(exc.detail)[:200]
        if exc.status_code == 400:  # FastAPI's body decoding failures (non-UTF-8 bytes)
            error, detail = "malformed_body", "the request body could not be decoded as UTF-8 JSON"
        return error_response(exc.status_code, error, detail, getattr(exc, "headers", None))

    @app.exception_handler(BookSourceError)
    async def _book_source(request: Request, exc: BookSourceError) -> JSONResponse:
        log.error("book source unavailable: %s", exc)
        return error_response(503, "book_source_unavailable", str(exc)[:300], {"Retry-After": "30"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "the service failed on this request; it was logged")


def document_error_bodies(schema: dict[str, Any]) -> None:
    """Make the OpenAPI say what clients really get on a refusal: FastAPI documents its default
    422 body (a list of errors echoing the input), but every error here is {error, detail}."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorBody"] = ErrorBody.model_json_schema()
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            for status in ("422", "4XX"):
                if status in responses:
                    responses[status] = {"description": responses[status].get("description", "refused"), **body}
    if not any("HTTPValidationError" in json.dumps(o) for o in schema.get("paths", {}).values()):
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)

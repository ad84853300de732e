"""JSON bodies of the grading and reward routes, parsed by the route itself rather than by
FastAPI's body parameters: FastAPI would ``json.loads`` every body on the event loop and validate
it there, while a large batch is bounded, parsed and validated here in a grading process (see
``parse_body``; app/grading/processes.py), whose interpreter lock is not the event loop's. The routes
are ordinary FastAPI path operations; ``json_body`` documents the body each one reads, and
``document_bodies`` puts those models into the OpenAPI document's components."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from app.api.errors import describe_validation_errors
from app.api.json_budget import outline_json
from app.api.json_pieces import InvalidBody, validate_in_pieces
from app.errors import ApiError
from app.grading.offload import in_process
from app.grading.processes import GradingProcessDied, GradingProcessFailed

M = TypeVar("M", bound=BaseModel)


# Bodies up to this size are parsed on the event loop (well under a millisecond); larger ones,
# up to the body limit, in a grading process (bounded first by app/api/json_budget.py, then
# validated a list element at a time by app/api/json_pieces.py, which keeps each piece's memory
# and the errors' order as for the whole body), so that a few megabytes of JSON hold nobody back.
ON_LOOP_BODY_BYTES = 64 * 1024

# The models ``json_body`` documented, for ``document_bodies``.
_DOCUMENTED: dict[str, type[BaseModel]] = {}


def require_json(request: Request) -> None:
    """Grading takes JSON only: a browser sends a form or ``text/plain`` body to another site
    without asking first, a JSON one never (see app/api/browser_guard.py)."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json" and not (media_type.startswith("application/") and
                                                 media_type.endswith("+json")):
        raise ApiError(415, "unsupported_media_type", "send the body as JSON with 'Content-Type: application/json'")


def _tenant_name(request: Request) -> str:
    tenant = getattr(request.state, "tenant", None)  # set by the tenant middleware
    return getattr(tenant, "name", "")


def _max_elements(request: Request) -> int:
    limits = request.app.state.settings.limits
    return max(limits.max_grades_per_batch, limits.max_tasks_per_request)


def _parse_large(model: type[M], raw: bytes, max_elements: int) -> M:
    # bounded before any parse (its cost is in its number of values); then a piece at a time
    return validate_in_pieces(model, raw, outline_json(raw, max_elements))


_Refusal = tuple[int, str, str, "dict[str, str] | None"]


def _parse_in_child(model: type[M], raw: bytes, max_elements: int) -> M | _Refusal:
    """In a grading process: the model, or the refusal the route answers with (an exception and
    its errors do not cross over: only what the client is told)."""
    try:
        return _parse_large(model, raw, max_elements)
    except (ValidationError, InvalidBody) as exc:
        return (*_described(exc), None)
    except ApiError as exc:
        return exc.status, exc.error, exc.detail, exc.headers


def _described(exc: ValidationError | InvalidBody) -> tuple[int, str, str]:
    errors = exc.errors if isinstance(exc, InvalidBody) else list(exc.errors(include_input=False))
    return describe_validation_errors(errors, located=False)


async def parse_body(request: Request, model: type[M]) -> M:
    require_json(request)
    try:
        raw = await request.body()
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "the client closed the connection before its body arrived") from None
    if len(raw) <= ON_LOOP_BODY_BYTES:
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            raise ApiError(*_described(exc)) from None
    processes = request.app.state.grading.processes
    try:
        parsed = await in_process(processes, _parse_in_child, model, raw, _max_elements(request),
                                  tenant=_tenant_name(request))
    except (GradingProcessDied, GradingProcessFailed):
        raise ApiError(503, "grading_unavailable", "the service failed while reading this body; send it again",
                       {"Retry-After": "1"}) from None
    if isinstance(parsed, tuple):
        raise ApiError(*parsed)
    return parsed


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads a ``model`` body with ``parse_body``."""
    _DOCUMENTED[model.__name__] = model
    content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}
    return {"requestBody": {"required": True, "content": content}}


def document_bodies(schema: dict[str, Any]) -> None:
    """The component schemas of every body ``json_body`` documented (and the models they use)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, model in _DOCUMENTED.items():
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(found.pop("$defs", {}))
        components[name] = found


class RequestRoute(APIRoute):
    """A path operation whose endpoint takes the ``Request`` alone and returns a ``Response``
    (the grading and reward routes: they read their own bodies). FastAPI's handler would solve
    parameters and dependencies there are none of, and look for a body to read and a response to
    serialise; called directly, the endpoint costs what it does. Everything else is FastAPI's:
    the router matches it, its exceptions go to the application's handlers, OpenAPI documents it.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        parameters = list(inspect.signature(self.endpoint).parameters.values())
        if self.dependencies or len(parameters) != 1 or parameters[0].annotation not in (Request, "Request"):
            raise TypeError(f"{self.path}: a RequestRoute endpoint takes the Request only")
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint

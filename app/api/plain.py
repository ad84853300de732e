"""What the hot-path endpoints share: they are plain Starlette routes (FastAPI's per-request
parameter handling cost more than grading a numeric answer), so they validate their bodies with
pydantic straight from the bytes, put themselves in the scope for the metrics, describe
themselves to OpenAPI by hand, and are answered by ``HotRoutes`` ahead of the router."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import describe_validation_errors
from app.api.json_budget import check_json_budget
from app.errors import ApiError
from app.grading.offload import off_loop

M = TypeVar("M", bound=BaseModel)


# Bodies up to this size are parsed on the event loop (well under a millisecond); larger ones,
# up to the body limit, on a worker thread, so that a few megabytes of JSON hold nobody back.
ON_LOOP_BODY_BYTES = 64 * 1024


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


def _checked_parse(model: type[M], raw: bytes, max_elements: int) -> M:
    check_json_budget(raw, max_elements)  # before the parse, which holds the interpreter lock throughout
    return model.model_validate_json(raw)


async def parse_body(request: Request, model: type[M]) -> M:
    require_json(request)
    try:
        raw = await request.body()
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "the client closed the connection before its body arrived") from None
    try:
        if len(raw) <= ON_LOOP_BODY_BYTES:
            return model.model_validate_json(raw)
        return await off_loop(_checked_parse, model, raw, _max_elements(request), tenant=_tenant_name(request))
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


class HotRoutes:
    """ASGI middleware, the innermost one: a POST to the exact path of a plain hot-path route is
    answered here, without the four layers a request otherwise crosses after the middleware
    (exception middleware, FastAPI's exit stack, the router's match over every route, and the
    route's own exception wrapper). Together they cost about as much as grading a numeric
    answer, and OpenRLHF sends one rollout per request.

    What those layers do for these routes is done here too: the route goes in the scope (the
    metrics label by it), and an exception goes to the application's handler for it, looked up
    as Starlette looks it up (a handler for the status of an HTTPException first, then one for
    the nearest class); an exception without one, or one for which only the catch-all handler
    exists, propagates to the server-error middleware as before. Any other method or path (a GET
    to a POST route's 405, a twin path not yet rewritten) goes through the router unchanged."""

    def __init__(self, app: ASGIApp, routes: Sequence[Route], handlers: Mapping[Any, Any]) -> None:
        self.app = app
        self.routes = {route.path: route for route in routes if route.methods == {"POST"}}
        # The application's own dict: handlers added after start-up are seen too.
        self.handlers = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        scope["route"], scope["endpoint"], scope["path_params"] = route, route.endpoint, {}
        request = Request(scope, receive, send)
        try:
            response = await route.endpoint(request)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler(self, exc: Exception) -> Any:
        handler = self.handlers.get(exc.status_code) if isinstance(exc, HTTPException) else None
        if handler is None:
            handler = next((self.handlers[cls] for cls in type(exc).__mro__ if cls in self.handlers), None)
        # The catch-all is the server-error middleware's, outside this one (as Starlette wires it).
        return None if handler is self.handlers.get(Exception) or handler is self.handlers.get(500) else handler


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

"""The card's own paths and helpful 404s.

The service card names its endpoints without a version prefix (``GET /tasks``, ``POST /grade``);
each is the twin of a ``/v1`` route: the same handler, the same authentication, the same OpenAPI
operation. The twin is a rewrite of the request path before routing, not a second route, so the
two cannot drift apart; the metrics label both by the ``/v1`` route.

A path that names no route gets a 404 naming the nearest one, so that a typo (``/v1/grades``,
``/get_rewards``) says what was meant instead of a bare "Not Found"."""

from __future__ import annotations

import copy
import difflib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

PREFIX = "/v1"
# Unprefixed paths answered by their /v1 twin: exact paths, and prefixes of parameterised ones.
TWIN_PATHS = frozenset({"/tasks", "/grade", "/grade/batch", "/splits", "/rewards"})
TWIN_PREFIXES = ("/tasks/", "/jobs/")


def twin_of(path: str) -> str | None:
    """The /v1 path an unprefixed card path stands for, or None."""
    if path in TWIN_PATHS or path.startswith(TWIN_PREFIXES):
        return PREFIX + path
    return None


class UnprefixedTwins:
    """ASGI middleware: rewrite a card path to its /v1 twin, in place (so that everything
    downstream, the access log included, sees the one canonical path)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (target := twin_of(scope["path"])) is not None:
            scope["path"] = target
            scope["raw_path"] = target.encode()
        await self.app(scope, receive, send)


def document_twins(schema: dict[str, Any]) -> None:
    """Give each twin the OpenAPI operation of its /v1 route (operation ids kept unique)."""
    paths = schema.get("paths", {})
    for path, item in list(paths.items()):
        short = path.removeprefix(PREFIX)
        if path == short or twin_of(short.replace("{", "").replace("}", "")) is None:
            continue
        twin = copy.deepcopy(item)
        for operation in twin.values():
            if isinstance(operation, dict) and "operationId" in operation:
                operation["operationId"] += "_unprefixed"
            if isinstance(operation, dict):
                operation["summary"] = f"{operation.get('summary', '')} (same as {path})".strip()
        paths.setdefault(short, twin)


def nearest_route(path: str, candidates: list[str]) -> str | None:
    """The route template closest to ``path`` (parameters compared as their names)."""
    if not candidates:
        return None
    plain = {c.replace("{", "").replace("}", "").replace(":path", ""): c for c in candidates}
    found = difflib.get_close_matches(path.rstrip("/") or "/", list(plain), n=1, cutoff=0.0)
    return plain[found[0]] if found else None


def install_not_found_hints(app: FastAPI) -> None:
    """404 for an unmatched path: {error, detail} naming the nearest route (never echoing the
    path sent, which may be anything)."""

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        detail = getattr(exc, "detail", None)
        if request.scope.get("route") is not None and detail not in (None, "Not Found"):
            return JSONResponse({"error": "not_found", "detail": str(detail)[:200]}, status_code=404)
        # The documented paths: FastAPI keeps included routers behind lazy wrappers, and the
        # OpenAPI document is the list a client can use anyway.
        hint = nearest_route(request.url.path, list(app.openapi().get("paths", {})))
        message = "no route for this path" + (f"; nearest: {hint}" if hint else "")
        return JSONResponse({"error": "not_found", "detail": message}, status_code=404)

    app.add_exception_handler(404, not_found)

"""Where a request lands: the one place that turns the paths clients may send into the paths the
router knows, and helpful 404s.

The service card names its endpoints without a version prefix (``GET /tasks``, ``POST /grade``);
each is the twin of a ``/v1`` route: the same handler, the same authentication, the same OpenAPI
operation. The twin is a rewrite of the request path before routing, not a second route, so the
two cannot drift apart; the metrics label both by the ``/v1`` route.

OpenRLHF posts to a bare URL from a fresh session, with no way to add a header: its tenants put a
reward key in the path instead, ``/get_reward/<key>``. The key is taken out of the path here,
before anything can see it (the body limits, the route, the metrics label, error logs and an
access log, which reads this same scope, all get the bare route), and kept in the scope under
``REWARD_URL_KEY`` for the tenant middleware.

A path that names no route gets a 404 naming the nearest one, so that a typo (``/v1/grades``,
``/get_rewards``) says what was meant instead of a bare "Not Found"."""

from __future__ import annotations

import copy
import difflib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

PREFIX = "/v1"
REWARD_PATH = "/get_reward"
REWARD_KEY_PREFIX = REWARD_PATH + "/"
# The scope entry holding a reward key taken out of the path ("" for /get_reward/ with no key).
REWARD_URL_KEY = "scaling_grader.reward_url_key"
# Unprefixed paths answered by their /v1 twin: exact paths, and prefixes of parameterised ones.
TWIN_PATHS = frozenset({"/tasks", "/grade", "/grade/batch", "/splits", "/rewards"})
TWIN_PREFIXES = ("/tasks/", "/jobs/")


def twin_of(path: str) -> str | None:
    """The /v1 path an unprefixed card path stands for, or None."""
    if path in TWIN_PATHS or path.startswith(TWIN_PREFIXES):
        return PREFIX + path
    return None


def canonical_path(scope: dict[str, Any]) -> None:
    """Rewrite ``scope`` in place to the path the router knows: a card path to its /v1 twin, a
    reward URL to /get_reward with its key moved to ``scope[REWARD_URL_KEY]``."""
    path = scope["path"]
    if path.startswith(REWARD_KEY_PREFIX):
        scope[REWARD_URL_KEY] = path[len(REWARD_KEY_PREFIX):]
        target = REWARD_PATH
    elif (twin := twin_of(path)) is not None:
        target = twin
    else:
        return
    scope["path"], scope["raw_path"] = target, target.encode()


class CanonicalPaths:
    """ASGI middleware, outside every other that looks at the path: ``canonical_path`` (so that
    everything downstream, the access log included, sees the one canonical path)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if scope["path"].endswith("\n"):
                # A route's pattern ends in "$", which matches before a final newline too: sent as
                # "%0A", "/v1/grade\n" reached POST /v1/grade (and "/v1/rewards\n" with the
                # single-body size limit) while its card twin "/grade\n" was a 404. No path the
                # service knows ends in a newline.
                await JSONResponse({"error": "not_found", "detail": "no route for this path"},
                                   status_code=404)(scope, receive, send)
                return
            canonical_path(scope)
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


# A path is compared by its first characters only: a typo is found there, and difflib's cost grows
# with the length of the path, which a client may make tens of kilobytes (on the event loop).
HINT_PATH_CHARS = 100


def nearest_route(path: str, candidates: list[str]) -> str | None:
    """The route template closest to ``path`` (parameters compared as their names)."""
    if not candidates:
        return None
    plain = {c.replace("{", "").replace("}", "").replace(":path", ""): c for c in candidates}
    found = difflib.get_close_matches(path[:HINT_PATH_CHARS].rstrip("/") or "/", list(plain), n=1, cutoff=0.0)
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

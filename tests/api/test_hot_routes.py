"""HotRoutes answers the plain hot-path routes ahead of the router: what the skipped layers did
for them must still happen (the route in the scope, each exception to the handler Starlette would
pick, the catch-all left to the server-error middleware), and nothing else may change route."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException

from app.api.plain import HotRoutes, NamedRoute
from app.errors import ApiError


class Refusal(ApiError):
    """A subclass: its handler is found through the class's MRO."""


def _app(seen: list[object]) -> FastAPI:
    async def echo(request: Request) -> Response:
        seen.append(request.scope.get("route"))
        body = await request.body()
        if body == b"api-error":
            raise Refusal(409, "conflict", "refused")
        if body == b"http-404":
            raise HTTPException(404, "gone")
        if body == b"http-413":
            raise HTTPException(413, "too big")
        if body == b"boom":
            raise RuntimeError("unexpected")
        return Response(b"ok:" + body)

    routes = [NamedRoute("/hot", echo, methods=["POST"])]
    app = FastAPI()
    app.router.routes[0:0] = routes

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"handler": "api_error"}, status_code=getattr(exc, "status", 500))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"handler": "http_error"}, status_code=getattr(exc, "status_code", 500))

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"handler": "not_found"}, status_code=404)

    async def catch_all(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"handler": "catch_all"}, status_code=500)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(404, not_found)
    app.add_exception_handler(Exception, catch_all)
    app.add_middleware(HotRoutes, routes=routes, handlers=app.exception_handlers)
    return app


@pytest.fixture
def hot() -> tuple[TestClient, list[object]]:
    seen: list[object] = []
    return TestClient(_app(seen), raise_server_exceptions=False), seen


def test_a_post_is_answered_with_the_route_in_the_scope(hot) -> None:
    client, seen = hot
    r = client.post("/hot", content=b"payload")
    assert (r.status_code, r.content) == (200, b"ok:payload")
    assert getattr(seen[0], "path", None) == "/hot"  # the metrics label requests by it


@pytest.mark.parametrize(("body", "status", "handler"), [
    (b"api-error", 409, "api_error"),  # by class, through the MRO (Refusal -> ApiError)
    (b"http-404", 404, "not_found"),  # a status handler first, as Starlette does
    (b"http-413", 413, "http_error"),  # else the class handler
    (b"boom", 500, "catch_all"),  # the catch-all runs in the server-error middleware, outermost
])
def test_each_exception_reaches_the_handler_starlette_would_pick(hot, body: bytes, status: int,
                                                                 handler: str) -> None:
    client, _ = hot
    r = client.post("/hot", content=body)
    assert (r.status_code, r.json()) == (status, {"handler": handler})


def test_other_methods_and_paths_go_through_the_router(hot) -> None:
    client, seen = hot
    r = client.get("/hot")
    assert (r.status_code, r.json()) == (405, {"handler": "http_error"})  # the router's 405
    assert client.post("/hot/", follow_redirects=False).status_code == 307  # not exact: the router redirects
    assert client.post("/elsewhere").json() == {"handler": "not_found"}
    assert seen == []  # none of them reached the endpoint through the shortcut

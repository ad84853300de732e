"""One routing path: every path a client may send becomes a route's own path in one place
(app/api/routing.py), and the graded routes are FastAPI path operations like the others, so an
exception in one reaches the handler FastAPI would pick and never shows a traceback."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException

from app.api.bodies import RequestRoute
from app.api.errors import install_error_handlers
from app.api.routing import PREFIX, REWARD_URL_KEY, TWIN_PATHS, canonical_path
from app.errors import ApiError
from app.main import create_app


def _canonical(path: str) -> dict[str, Any]:
    scope = {"type": "http", "path": path, "raw_path": path.encode()}
    canonical_path(scope)
    return scope


@pytest.mark.parametrize("path", [*sorted(TWIN_PATHS), "/tasks/synthetic/0/1", "/jobs/abc"])
def test_a_card_path_becomes_its_v1_route(path: str) -> None:
    scope = _canonical(path)
    assert (scope["path"], scope["raw_path"]) == (PREFIX + path, (PREFIX + path).encode())
    assert REWARD_URL_KEY not in scope


@pytest.mark.parametrize(("path", "key"), [
    ("/get_reward/k3y", "k3y"),
    ("/get_reward/", ""),  # no key: refused by the tenant middleware, never the local user's by accident
    ("/get_reward/k3y/../../v1/tasks", "k3y/../../v1/tasks"),  # the rest is the key, not a way elsewhere
])
def test_a_reward_url_loses_its_key_before_anything_reads_the_path(path: str, key: str) -> None:
    scope = _canonical(path)
    assert (scope["path"], scope["raw_path"], scope[REWARD_URL_KEY]) == ("/get_reward", b"/get_reward", key)


@pytest.mark.parametrize("path", ["/v1/grade", "/get_reward", "/get_rewardx", "/v1/get_reward/k", "/grades"])
def test_other_paths_are_left_alone(path: str) -> None:
    assert _canonical(path) == {"type": "http", "path": path, "raw_path": path.encode()}


def test_the_reward_key_never_reaches_the_metrics_label() -> None:
    client = TestClient(create_app())
    secret = "reward-key-do-not-log"
    answer = client.post(f"/get_reward/{secret}", json={"query": ["Final answer: 1 s"], "labels": ["1 s"]})
    assert answer.status_code == 200 and answer.json()["scores"] == [1.0]
    metrics = client.get("/metrics").text
    assert secret not in metrics and 'route="/get_reward"' in metrics


class Refusal(ApiError):
    """A subclass: its handler is found through the class's MRO."""


def _app() -> FastAPI:
    router = APIRouter(route_class=RequestRoute)

    @router.post("/hot")
    async def hot(request: Request) -> Response:
        body = await request.body()
        if body == b"api-error":
            raise Refusal(409, "conflict", "refused")
        if body == b"http-404":
            raise HTTPException(404, "gone")
        if body == b"boom":
            raise RuntimeError("secret internals")
        return Response(b"ok:" + body)

    app = FastAPI()
    app.include_router(router)
    install_error_handlers(app)
    return app


@pytest.mark.parametrize(("body", "status", "error"), [
    (b"api-error", 409, "conflict"),
    (b"http-404", 404, "not_found"),
    (b"boom", 500, "internal_error"),
])
def test_an_exception_in_a_graded_route_reaches_the_app_handler(body: bytes, status: int, error: str) -> None:
    answer = TestClient(_app(), raise_server_exceptions=False).post("/hot", content=body)
    assert (answer.status_code, answer.json()["error"]) == (status, error)
    assert "Traceback" not in answer.text and "secret internals" not in answer.text


def test_a_request_route_takes_the_request_only() -> None:
    router = APIRouter(route_class=RequestRoute)

    async def needs_a_parameter(request: Request, n: int) -> Response:
        return Response(b"")

    with pytest.raises(TypeError):
        router.add_api_route("/x", needs_a_parameter, methods=["POST"])

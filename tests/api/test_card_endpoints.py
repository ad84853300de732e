"""The card's unprefixed endpoints (GET /tasks, POST /grade...) answer exactly as their /v1
twins on a real server, share their OpenAPI operation, and an unknown path's 404 names the
nearest route."""

from __future__ import annotations

import httpx
import pytest

from tests.support.oracle import right, synthetic_tasks, wrong


@pytest.fixture(scope="module")
def http(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as c:
        yield c


def _same(a: httpx.Response, b: httpx.Response) -> None:
    assert (a.status_code, a.headers["content-type"]) == (b.status_code, b.headers["content-type"])
    assert a.json() == b.json()


def test_task_listing_as_the_card_shows_it(http: httpx.Client) -> None:
    short = http.get("/tasks", params={"split": "synthetic", "seed": 3})
    _same(short, http.get("/v1/tasks", params={"split": "synthetic", "seed": 3}))
    assert short.status_code == 200 and short.json()["seed"] == 3 and short.json()["tasks"]
    task_id = short.json()["tasks"][0]["id"]
    _same(http.get(f"/tasks/{task_id}"), http.get(f"/v1/tasks/{task_id}"))
    _same(http.get("/splits"), http.get("/v1/splits"))


def test_grading_twins_give_the_same_verdicts(http: httpx.Client) -> None:
    task = synthetic_tasks(2, seed=21)
    items = [{"task_id": task[0].id, "completion": right(task[0].id)},
             {"task_id": task[1].id, "completion": wrong(task[1].id)}]
    _same(http.post("/grade", json=items[0]), http.post("/v1/grade", json=items[0]))
    assert http.post("/grade", json=items[0]).json()["reward"] == 1.0
    _same(http.post("/grade/batch", json={"items": items}), http.post("/v1/grade/batch", json={"items": items}))
    short = http.post("/rewards", json={"items": items})
    _same(short, http.post("/v1/rewards", json={"items": items}))
    assert short.json()["rewards"] == [1.0, 0.0]


def test_twins_refuse_exactly_as_v1(http: httpx.Client) -> None:
    bad = {"task_id": "synthetic/0/0", "reference": {"values": ["1 s"]}, "completion": "x"}
    _same(http.post("/grade", json=bad), http.post("/v1/grade", json=bad))
    assert http.post("/grade", json=bad).status_code == 422
    _same(http.get("/jobs/no-such-job"), http.get("/v1/jobs/no-such-job"))
    assert http.get("/jobs/no-such-job").json()["error"] == "unknown_job"
    _same(http.get("/tasks", params={"split": "nope"}), http.get("/v1/tasks", params={"split": "nope"}))


def test_openapi_documents_each_twin_as_its_v1_route(http: httpx.Client) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    for short in ("/tasks", "/grade", "/grade/batch", "/splits", "/rewards", "/jobs/{job_id}"):
        assert short in paths, short
        long = paths["/v1" + short]
        for method, operation in paths[short].items():
            assert operation.get("requestBody") == long[method].get("requestBody")
            assert operation["responses"] == long[method]["responses"]
    ids = [op.get("operationId") for item in paths.values() for op in item.values() if op.get("operationId")]
    assert len(ids) == len(set(ids)), "operation ids must stay unique"


@pytest.mark.parametrize(("path", "nearest"), [
    ("/v1/grades", "/v1/grade"),
    ("/get_rewards", "/get_reward"),
    ("/v1/split", "/v1/splits"),
    ("/v2/rewards", "/v1/rewards"),
])
def test_unknown_path_names_the_nearest_route(http: httpx.Client, path: str, nearest: str) -> None:
    response = http.post(path, json={})
    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "not_found" and body["detail"].endswith(f"nearest: {nearest}")


def test_not_found_never_echoes_the_path(http: httpx.Client) -> None:
    response = http.get("/<script>alert-secret-token-xyz</script>")
    assert response.status_code == 404
    assert "secret-token" not in response.text and "script" not in response.text


def test_a_known_route_keeps_its_own_404(http: httpx.Client) -> None:
    body = http.get("/v1/tasks/synthetic/not-a-task").json()
    assert body["error"] == "unknown_task" and "nearest" not in body["detail"]

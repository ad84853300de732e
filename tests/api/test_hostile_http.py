"""Hostile requests against a real server process: every one gets a short, typed 4xx (or a 200
with an unscored item where a trainer endpoint isolates bad labels), never a 500, a traceback in
the body or the log, or an echo of what was sent. Then a seeded fuzz loop over the OpenAPI."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.support.server import ROOT, free_port, stop_process, wait_until_up

pytestmark = pytest.mark.slow  # a real HTTP server per module: left out of `make test-fast`

CANARY = "CANARY-" + os.urandom(6).hex()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    """A server whose combined output goes to a file the tests can read."""
    log = tmp_path_factory.mktemp("sg-hostile") / "server.log"
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "warning"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_up(url, process)
            with httpx.Client(base_url=url, timeout=60) as client:
                yield client, log
        finally:
            stop_process(process)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


JSON = {"content-type": "application/json"}
LABEL_REWARD = {"query": ["Final answer: 1 s"]}

# (name, path, request kwargs, status, error or None, check on the JSON body or None)
HOSTILE: list[tuple[str, str, dict[str, Any], int, str | None, Any]] = [
    # absurd nesting: refused before it is parsed (more JSON values than an item may hold), never a
    # RecursionError
    ("body of 100k nested arrays", "/v1/grade", {"content": nested(100_000), "headers": JSON}, 413,
     "body_too_complex", None),
    ("completion nested 50k deep", "/v1/rewards",
     {"content": '{"items": [{"task_id": "x", "completion": ' + nested(50_000) + "}]}", "headers": JSON},
     400, "malformed_json", None),
    # a label is JSON inside a JSON string: parsed by us, so its depth is ours to bound
    *[(f"label string nested {d} deep", "/get_reward", {"json": {**LABEL_REWARD, "labels": [nested(d)]}}, 200,
       None, lambda b: b["extra_logs"]["scored"] == [0.0]) for d in (985, 5_000, 100_000)],
    ("label object with a value nested 5000 deep", "/get_reward",
     {"json": {**LABEL_REWARD, "labels": ['{"values": ["1 s"], "x": ' + nested(5_000) + "}"]}}, 200, None,
     lambda b: b["extra_logs"]["scored"] == [0.0]),
    # booleans are not quantities (True == 1 in Python, and lax parsing read true as 1.0)
    ("reference value true", "/v1/grade", {"json": {"reference": {"values": [True]}, "completion": "Final answer: 1"}},
     422, "invalid_request", None),
    ("label [true]", "/get_reward", {"json": {"query": ["Final answer: 1"], "labels": ["[true]"]}}, 200, None,
     lambda b: b["rewards"] == [0.0] and b["extra_logs"]["scored"] == [0.0]),
    ("rewards item with reference false", "/v1/rewards",
     {"json": {"items": [{"reference": {"values": [False]}, "completion": "Final answer: 0"}]}}, 422,
     "invalid_request", None),
    # references no answer could match: refused, not silently scored zero forever
    ("reference value NaN", "/v1/grade",
     {"content": '{"reference": {"values": [NaN]}, "completion": "Final answer: 1"}', "headers": JSON}, 422,
     "invalid_reference", None),
    ("reference value 1e400 s", "/v1/grade",
     {"json": {"reference": {"values": ["1e400 s"]}, "completion": "Final answer: 1e400 s"}}, 422,
     "invalid_reference", None),
    ("label [Infinity]", "/get_reward", {"json": {"query": ["Final answer: 1e400"], "labels": ["[Infinity]"]}}, 200,
     None, lambda b: b["extra_logs"]["scored"] == [0.0]),
    # the message names the field, even one called "query"
    ("get_reward without query", "/get_reward", {"json": {"labels": ["x"]}}, 422, "invalid_request",
     lambda b: b["detail"].startswith("query:")),
    ("get_reward query of the wrong type", "/get_reward", {"json": {"query": [CANARY, 7]}}, 422, "invalid_request",
     lambda b: b["detail"].startswith("query.1:")),
    # encodings and odd bodies
    ("latin-1 body", "/v1/grade", {"content": '{"completion": "\u00e9"}'.encode("latin-1"), "headers": JSON}, 400,
     "malformed_json", None),
    ("UTF-16 body", "/v1/grade", {"content": json.dumps({"completion": CANARY}).encode("utf-16"), "headers": JSON},
     400, "malformed_json", None),
    ("integer of 5000 digits", "/v1/grade",
     {"content": '{"task_id": "x", "completion": "a", "wait": ' + "9" * 5000 + "}", "headers": JSON}, 400,
     "malformed_json", None),
]


@pytest.mark.parametrize(("path", "kwargs", "status", "error", "check"), [h[1:] for h in HOSTILE],
                         ids=[h[0] for h in HOSTILE])
def test_hostile_request(served, path: str, kwargs: dict[str, Any], status: int, error: str | None,
                         check: Any) -> None:
    client, log = served
    r = client.post(path, **kwargs)
    assert r.status_code == status, r.text[:300]
    body = r.json()
    if status >= 400:
        assert set(body) == {"error", "detail"} and len(body["detail"]) <= 600, body
        assert error is None or body["error"] == error, body
    assert CANARY not in r.text
    if check is not None:
        assert check(body), body
    assert "Traceback" not in log.read_text(errors="replace")


# ---- a seeded fuzz loop over the OpenAPI ------------------------------------------------------

def junk(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of a random type, sometimes huge, deep, non-finite or oddly encoded."""
    pick = rng.randrange(12 if depth < 4 else 8)
    return [
        lambda: None, lambda: rng.choice([True, False]), lambda: rng.choice([0, -1, 2**63, -(10**300)]),
        lambda: rng.choice([0.5, -0.0, 1e308, 5e-324]),
        lambda: CANARY + rng.choice(["", "\u0000", "\u202e", "\ufeff", "\U0001f600", "\\boxed{", "<think>"]),
        lambda: rng.choice(["synthetic/1/1", "impl/nope", "../../etc/passwd", "tasks/sc-001", "", " "]),
        lambda: "x" * rng.choice([1, 1000, 100_000]) + CANARY,
        lambda: rng.choice(["Final answer: 2 s", "\\boxed{3 GB}", '{"rows": [{"a": 1}]}']),
        lambda: [junk(rng, depth + 1) for _ in range(rng.randrange(4))],
        lambda: {rng.choice(["completion", "task_id", "reference", "values", "rows", "items", "query", "labels",
                             "judge", "tolerance", "wait", "request_id", CANARY]): junk(rng, depth + 1)
                 for _ in range(rng.randrange(5))},
        lambda: nested(rng.choice([50, 300])),
        lambda: {"values": [junk(rng, depth + 1)], "rows": junk(rng, depth + 1)},
    ][pick]()


def mutated(rng: random.Random, schema_example: dict[str, Any]) -> dict[str, Any]:
    body = dict(schema_example)
    for _ in range(rng.randrange(1, 4)):
        body[rng.choice([*body, CANARY])] = junk(rng)
    return body


EXAMPLES = {
    "/v1/grade": {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"},
    "/v1/grade/batch": {"items": [{"task_id": "synthetic/1/1", "completion": "Final answer: 2 s"}]},
    "/v1/rewards": {"items": [{"reference": {"rows": [{"a": 1}]}, "completion": '{"rows": [{"a": 1}]}'}]},
    "/get_reward": {"query": ["Final answer: 2 s"], "labels": ['["2 s"]']},
}


def test_fuzzed_requests_never_fail_the_server(served) -> None:
    client, log = served
    paths = client.get("/openapi.json").json()["paths"]
    assert set(EXAMPLES) <= set(paths)
    rng = random.Random(20261129)
    seen: set[int] = set()
    for _ in range(400):
        path = rng.choice(sorted(paths))
        if "post" in paths[path]:
            example = EXAMPLES.get(path, {})
            payload = mutated(rng, example) if rng.random() < 0.8 else junk(rng)
            r = client.post(path, content=json.dumps(payload, allow_nan=True), headers=JSON)
        else:
            concrete = path.replace("{task_id}", quote(str(junk(rng))[:300])).replace(
                "{job_id}", quote(str(junk(rng))[:300]))
            params = {k: str(junk(rng))[:2000] for k in rng.sample(["split", "seed", "n", "offset", "chapters",
                                                                    "wait"], 3)}
            r = client.get(concrete, params=params)
        seen.add(r.status_code)
        assert r.status_code < 500, (path, r.status_code, r.text[:300])
        if r.status_code >= 400:
            body = r.json()
            assert set(body) == {"error", "detail"} and len(body["detail"]) <= 600, body
            assert CANARY not in r.text, (path, r.text[:300])
    assert {200, 422} <= seen  # the loop reached both the graders and the validators
    assert "Traceback" not in log.read_text(errors="replace")


# ---- secrets in a deployment's configuration ---------------------------------------------------

def test_redis_password_never_reaches_clients_or_the_log(tmp_path: Path) -> None:
    """Redis configured with a password but down: every answer says so without the URL."""
    password = "pw-" + os.urandom(8).hex()
    log = tmp_path / "server.log"
    port = free_port()
    env = {**os.environ, "SCALING_GRADER_REDIS_URL": f"redis://grader:{password}@127.0.0.1:{free_port()}/0"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "debug"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_up(url, process)
            with httpx.Client(base_url=url, timeout=30) as client:
                ready = client.get("/readyz")
                queued = client.post("/v1/grade", json={"task_id": "impl/kv_cache_bytes", "completion": "x"})
                job = client.get("/v1/jobs/abc")
                inline = client.post("/v1/grade", json={"reference": {"values": ["2 s"]}, "request_id": "r1",
                                                         "completion": "Final answer: 2 s"})
        finally:
            stop_process(process)
    assert ready.status_code == 503 and ready.json()["checks"]["queue"]["ok"] is False
    assert queued.status_code == 503 and queued.json()["error"] == "queue_unavailable"
    assert job.status_code == 503
    assert inline.status_code == 200 and inline.json()["reward"] == 1.0  # inline grading carries on
    for text in (ready.text, queued.text, job.text, log.read_text(errors="replace")):
        assert password not in text and "redis://" not in text


def test_openapi_documents_the_error_body_clients_get(served) -> None:
    client, _ = served
    schema = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in json.dumps(schema)  # FastAPI's default, never sent
    error_body = schema["components"]["schemas"]["ErrorBody"]
    refused = client.get("/v1/tasks", params={"n": -1})
    assert refused.status_code == 422 and set(error_body["required"]) <= set(refused.json())
    documented = 0
    for operations in schema["paths"].values():
        for operation in operations.values():
            for status in ("422", "4XX"):
                if status in operation["responses"]:
                    ref = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/ErrorBody"
                    documented += 1
    assert documented >= 8

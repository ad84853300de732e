"""The HTTP contract, through a real server process."""

from __future__ import annotations

import httpx
import pytest

from app.quantities import parse_quantity

pytestmark = pytest.mark.slow  # a real HTTP server per module: left out of `make test-fast`


@pytest.fixture(scope="module")
def client(server_url):
    with httpx.Client(base_url=server_url, timeout=30) as c:
        yield c


def _in_other_units(gold: list[str]) -> str:
    out = []
    for g in gold:
        q = parse_quantity(g)
        unit, scale = {"[information]": ("MiB", 2**20), "[time]": ("µs", 1e-6),
                       "[operation]": ("GFLOPs", 1e9)}.get(q.dimension, (None, 1))
        out.append(f"{q.value / scale:.8g} {unit}" if unit else g)
    return "Final answer: " + ", ".join(out)


def test_batch_of_four_tasks_round_trips(client: httpx.Client) -> None:
    from app.tasks.synthetic.bank import SyntheticBank

    body = client.get("/v1/tasks", params={"split": "synthetic", "seed": 3, "n": 4}).json()
    assert body["n"] == 4 and len(body["tasks"]) == 4
    for public in body["tasks"]:
        assert "gold" not in public and "hidden" not in public
        gold = list(SyntheticBank().get(public["id"]).gold)  # the oracle, in the test process
        right = client.post("/v1/grade", json={"task_id": public["id"], "completion": _in_other_units(gold)})
        assert right.status_code == 200 and right.json()["reward"] == 1.0, right.json()
        q = parse_quantity(gold[0])
        off = gold.copy()
        off[0] = f"{q.value * 1.10!r} {gold[0].split(' ', 1)[1]}"
        completion = "Final answer: " + ", ".join(off)
        wrong = client.post("/v1/grade", json={"task_id": public["id"], "completion": completion})
        assert wrong.json()["reward"] == 0.0 and wrong.json()["outcome"] == "incorrect"


def test_grade_result_explains_itself(client: httpx.Client) -> None:
    r = client.post("/v1/grade", json={"reference": {"values": ["3.35 TB/s", "80 GB"]},
                                       "completion": "Final answer: 3350 GB/s, 81 GB"}).json()
    assert r["outcome"] == "correct" and r["tolerance"] == 0.02
    assert [v["extracted"] for v in r["values"]] == ["3350 GB/s", "81 GB"]
    assert all(v["correct"] for v in r["values"])


def test_inline_reference_tolerance_and_chat_completion(client: httpx.Client) -> None:
    messages = [{"role": "user", "content": "question"},
                {"role": "assistant", "content": [{"type": "text", "text": "Final answer: 104 s"}]}]
    loose = client.post("/v1/grade", json={"reference": {"values": ["100 s"], "tolerance": 0.05},
                                           "completion": messages}).json()
    strict = client.post("/v1/grade", json={"reference": {"values": ["100 s"]}, "completion": messages,
                                            "tolerance": 0.01}).json()
    assert (loose["reward"], strict["reward"]) == (1.0, 0.0)


def test_batch_grading_keeps_order_and_isolates_bad_items(client: httpx.Client) -> None:
    items = [
        {"reference": {"values": ["1 s"]}, "completion": "Final answer: 1 s"},
        {"task_id": "synthetic/0/nope", "completion": "Final answer: 1 s"},
        {"reference": {"values": ["1 s"]}, "completion": "Final answer: 2 s"},
    ]
    results = client.post("/v1/grade/batch", json={"items": items}).json()["results"]
    assert [r["outcome"] for r in results] == ["correct", "invalid_request", "incorrect"]


def test_get_single_task_and_splits(client: httpx.Client) -> None:
    task = client.get("/v1/tasks/synthetic/3/17").json()
    assert task["id"] == "synthetic/3/17" and task["prompt"]
    splits = {s["name"] for s in client.get("/v1/splits").json()["splits"]}
    assert "synthetic" in splits


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "error"),
    [
        ("get", "/v1/tasks", {"params": {"split": "nope"}}, 404, "unknown_split"),
        ("get", "/v1/tasks", {"params": {"n": -1}}, 422, "invalid_request"),
        ("get", "/v1/tasks", {"params": {"n": 10**6}}, 422, "invalid_request"),
        ("get", "/v1/tasks", {"params": {"seed": "x"}}, 422, "invalid_request"),
        ("get", "/v1/tasks/synthetic/1/x", {}, 404, "unknown_task"),
        ("post", "/v1/grade", {"json": {"task_id": "synthetic/1/99x", "completion": "x"}}, 404, "unknown_task"),
        ("post", "/v1/grade", {"json": {"completion": "x"}}, 422, "invalid_request"),
        ("post", "/v1/grade", {"json": {"task_id": "synthetic/1/1"}}, 422, "invalid_request"),
        ("post", "/v1/grade", {"json": {"reference": {"values": ["not a number"]}, "completion": "x"}}, 422,
         "invalid_reference"),
        ("post", "/v1/grade", {"content": b'{"task_id": ', "headers": {"content-type": "application/json"}}, 400,
         "malformed_json"),
        ("post", "/v1/grade", {"content": b'{"task_id": "synthetic/1/1", "completion": "\xff\xfe"}',
                               "headers": {"content-type": "application/json"}}, 400, None),
        ("post", "/v1/grade", {"json": {"task_id": "synthetic/1/1", "completion": "a" * 10_000_000}}, 413,
         "payload_too_large"),
        ("post", "/v1/grade/batch", {"json": {"items": []}}, 422, "invalid_request"),
        ("delete", "/v1/grade", {}, 405, "method_not_allowed"),
    ],
)
def test_bad_input_gets_a_short_4xx(client: httpx.Client, method, path, kwargs, status, error) -> None:
    r = client.request(method.upper(), path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "detail"} and len(body["detail"]) <= 600
    if error:
        assert body["error"] == error
    assert "Traceback" not in r.text and "aaaa" not in r.text


def test_submitted_text_is_never_echoed(client: httpx.Client) -> None:
    secret = "SECRET-CODE-" + "x" * 50
    r = client.post("/v1/grade", json={"task_id": "synthetic/1/1", "completion": 42, "note": secret})
    assert r.status_code == 422 and secret not in r.text


def test_health_ready_metrics_docs(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["ready"] is True and ready["checks"]["mode"]["info"] == "embedded"
    client.post("/v1/grade", json={"reference": {"values": ["1 s"]}, "completion": "Final answer: 1 s"})
    metrics = client.get("/metrics").text
    assert 'scaling_grader_grades_total{grading="numeric",outcome="correct",split="inline"}' in metrics
    assert "scaling_grader_http_request_seconds_bucket" in metrics
    assert client.get("/openapi.json").json()["info"]["title"] == "scaling-grader"
    assert client.get("/docs").status_code == 200


def _unmatched_posts(metrics: str) -> float:
    """POST requests counted under no route, over every status."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("scaling_grader_http_requests_total{") and 'method="POST",route="unmatched"' in line)


def test_metrics_label_the_grading_and_reward_routes(client: httpx.Client) -> None:
    # The hot path (its own route class, called without FastAPI's parameter handling); each must
    # be counted under its own path.
    # The server is shared with other test modules (some post to unknown paths): what counts is
    # that these requests add nothing to the unmatched series.
    unmatched_before = _unmatched_posts(client.get("/metrics").text)
    item = {"reference": {"values": ["1 s"]}, "completion": "Final answer: 1 s"}
    client.post("/v1/grade", json=item)
    client.post("/v1/grade/batch", json={"items": [item]})
    client.post("/v1/rewards", json={"items": [item]})
    client.post("/get_reward", json={"query": ["Q Final answer: 1 s"], "prompts": ["Q"], "labels": ["1 s"]})
    metrics = client.get("/metrics").text
    for route in ("/v1/grade", "/v1/grade/batch", "/v1/rewards", "/get_reward"):
        assert f'scaling_grader_http_requests_total{{method="POST",route="{route}",status="200"}}' in metrics
        assert f'scaling_grader_http_request_seconds_count{{route="{route}"}}' in metrics
    assert _unmatched_posts(metrics) == unmatched_before


def test_openapi_documents_the_grade_body(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/v1/grade"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    name = body["$ref"].rsplit("/", 1)[1]
    schemas = spec["components"]["schemas"]
    assert {"task_id", "reference", "completion"} <= set(schemas[name]["properties"])
    assert "InlineReference" in schemas and "ChatMessage" in schemas


def test_serve_refuses_a_public_bind_without_tenants() -> None:
    import subprocess
    import sys

    from tests.support.server import ROOT

    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "tenants file" in done.stderr


def test_serve_refuses_several_workers_in_embedded_mode() -> None:
    # Embedded jobs live in one process: with two, a poll reached the other one half the time (404).
    import os
    import signal
    import subprocess
    import sys

    from tests.support.server import ROOT, free_port

    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    child = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(free_port()), "--workers", "2"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        _, stderr = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it started serving: end it and its worker processes
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail("serve started two embedded workers")
    assert child.returncode == 2 and "SCALING_GRADER_REDIS_URL" in stderr and "Traceback" not in stderr


def test_rows_split_served_and_graded_over_http(client: httpx.Client) -> None:
    import json as _json

    from app.settings import Settings
    from app.tasks.tasks.bank import load_bank

    batch = client.get("/v1/tasks", params={"split": "tasks", "n": 3, "seed": 2}).json()["tasks"]
    assert len(batch) == 3 and all(t["grading"] == "rows" for t in batch)
    bank = load_bank(Settings())
    for public in batch:
        rows = bank.get(public["id"]).gold
        answer = "Working...\n```json\n" + _json.dumps({"rows": rows}) + "\n```"
        right = client.post("/v1/grade", json={"task_id": public["id"], "completion": answer}).json()
        assert right["outcome"] == "correct" and right["reward"] == 1.0
    inline = client.post("/v1/grade", json={"reference": {"rows": [{"x": 1.5, "ok": True}]},
                                            "completion": '{"rows": [{"ok": true, "x": 1.5}]}'}).json()
    assert inline["reward"] == 1.0
    bad = client.post("/v1/grade", json={"reference": {"rows": [{"x": {"nested": 1}}]}, "completion": "{}"})
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_reference"


def test_a_split_without_its_source_does_not_hide_the_others(tmp_path) -> None:
    from tests.support.server import running_server

    env = {"SCALING_GRADER_BOOK_MIRROR": str(tmp_path / "missing"), "SCALING_GRADER_BOOK_CACHE": str(tmp_path / "c"),
           "SCALING_GRADER_BOOK_BASE_URL": "http://127.0.0.1:9/nowhere"}
    with running_server(env) as url:
        splits = {s["name"]: s for s in httpx.get(url + "/v1/splits", timeout=60).json()["splits"]}
        assert splits["synthetic"]["available"] and splits["tasks"]["available"]
        assert splits["book"]["available"] is False and "missing from mirror" in splits["book"]["error"]
        book = httpx.get(url + "/v1/tasks", params={"split": "book"}, timeout=60)
        assert book.status_code == 503 and book.json()["error"] == "book_source_unavailable"
        assert "Traceback" not in book.text


def test_a_malformed_redis_url_is_a_clear_error_without_the_password() -> None:
    import subprocess
    import sys

    from tests.support.server import ROOT

    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "SCALING_GRADER_REDIS_URL": "http//:hunter2@redis-host"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--port", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "redis_url" in done.stderr and "redis://" in done.stderr
    assert "hunter2" not in done.stderr and "Traceback" not in done.stderr

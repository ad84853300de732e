"""A hostile client against a real server process with tenants: it cannot hang or slow the
service, cross into another tenant, forge a browser's request, or turn its own mistakes into
server errors.

One server for the module (embedded mode, four tenants, a loopback fake judge): ``ops`` is the
operator; ``alpha`` grades judge items under an in-flight cap of 2; ``beta`` has a burst of 20
grades and almost no refill; ``gamma`` is a plain tenant the others must not see."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.tasks.synthetic.bank import _FAMILY_CHAPTERS
from app.tenants import new_key
from tests.fake_openai import FakeOpenAI
from tests.support.judge_asks import ASKS_PER_CORRECT
from tests.support.oracle import right, synthetic_tasks
from tests.support.server import logged_server

pytestmark = pytest.mark.slow  # a real HTTP server for the module: left out of `make test-fast`

SLOW_JUDGE_SECONDS = 4.0
CANARY = "CANARY-" + os.urandom(6).hex()


@dataclass
class Served:
    url: str
    port: int
    log: Path
    keys: dict[str, str]
    judge: FakeOpenAI

    def client(self, tenant: str | None, **headers: str) -> httpx.Client:
        auth = {"authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.url, timeout=120, headers={**auth, **headers})


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    judge = FakeOpenAI(slow_seconds=SLOW_JUDGE_SECONDS).start()
    tmp = Path(tempfile.mkdtemp(prefix="sg-hostile-client-"))
    keys, lines = {}, []
    tenants = {
        "ops": "operator = true\n",
        "alpha": f'max_in_flight = 2\nrate_per_second = 1000\nburst = 1000\njudge_base_urls = ["{judge.base_url}"]\n',
        "beta": "rate_per_second = 0.001\nburst = 20\n",
        "gamma": f'judge_base_urls = ["{judge.base_url}"]\n',
    }
    for name, extra in tenants.items():
        keys[name], digest = new_key()
        lines.append(f'[[tenant]]\nname = "{name}"\nkey_sha256 = "{digest}"\n{extra}')
    (tmp / "tenants.toml").write_text("\n".join(lines))
    log = tmp / "server.log"
    env = {"SCALING_GRADER_TENANTS_FILE": str(tmp / "tenants.toml"),
           "SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": json.dumps([judge.base_url]),
           "SCALING_GRADER_JUDGE__MAX_RETRIES": "0"}
    try:
        with logged_server(env, log) as (url, _):
            yield Served(url, int(url.rsplit(":", 1)[1]), log, keys, judge)
    finally:
        judge.stop()
    assert "Traceback" not in log.read_text(errors="replace")


def judge_task_ids(served: Served, n: int) -> list[str]:
    with served.client("ops") as client:
        tasks = client.get("/v1/tasks", params={"split": "exam", "n": 500}).json()["tasks"]
    found = [t["id"] for t in tasks if t["grading"] == "judge"]
    assert len(found) >= n
    return found[:n]


def assert_retry_after(r: httpx.Response) -> None:
    assert r.status_code == 429
    assert r.headers["retry-after"].isdigit() and int(r.headers["retry-after"]) >= 1


def status_counts(client: httpx.Client) -> dict[str, dict[str, int]]:
    r = client.get("/v1/status")
    assert r.status_code == 200, r.text
    return r.json()["grades"]["by_split"]


# ---- 1. bounded work per request ------------------------------------------------------------

def test_a_huge_offset_lists_at_once_and_the_service_keeps_answering(served: Served) -> None:
    chapter = sorted(set(_FAMILY_CHAPTERS.values()))[0]
    far = {"split": "synthetic", "chapters": chapter, "offset": 10**16, "n": 8}
    past_the_end = {**far, "offset": 2**62}  # beyond the last index an id can name: nothing there
    with served.client("gamma") as client, concurrent.futures.ThreadPoolExecutor(8) as pool:
        # more at once than the threadpool the old walk pinned for good
        listings = list(pool.map(lambda i: client.get("/v1/tasks", params=(far, past_the_end)[i % 2]), range(48)))
        assert client.get("/healthz").status_code == 200
    assert all(r.status_code == 200 for r in listings), [r.text for r in listings if r.status_code != 200][:1]
    assert all(r.json()["tasks"] == [] for r in listings[1::2])
    for r in listings[::2]:
        tasks = r.json()["tasks"]
        assert len(tasks) == 8 and {t["chapter"] for t in tasks} == {chapter}
    with served.client("gamma") as client:  # every listed id resolves
        for task in listings[0].json()["tasks"]:
            assert client.get(f"/v1/tasks/{task['id']}").json()["prompt"] == task["prompt"]


def test_offsets_and_counts_past_their_bounds_are_refused(served: Served) -> None:
    with served.client("gamma") as client:
        for params in ({"offset": 2**62 + 1}, {"offset": -1}, {"n": 10**6}, {"seed": 2**70}):
            r = client.get("/v1/tasks", params={"split": "synthetic", **params})
            assert r.status_code == 422 and set(r.json()) == {"error", "detail"}, (params, r.text)


def test_a_quadratic_rows_answer_is_graded_and_healthz_stays_up(served: Served) -> None:
    rows = [{"name": "r", "x": i + 0.5} for i in range(1000)]
    item = {"reference": {"rows": rows}, "completion": json.dumps({"rows": rows[::-1]})}
    with served.client("gamma") as client, concurrent.futures.ThreadPoolExecutor(2) as pool:
        batch = pool.submit(client.post, "/v1/grade/batch", json={"items": [item] * 40})
        health = [client.get("/healthz").status_code for _ in range(5)]
        r = batch.result()
    assert health == [200] * 5
    assert r.status_code == 200 and [x["reward"] for x in r.json()["results"]] == [0.0] * 40


# ---- 2. limits in grades ---------------------------------------------------------------------

def test_rate_limits_count_grades_and_a_refused_batch_grades_nothing(served: Served) -> None:
    tasks = synthetic_tasks(13, seed=404)
    items = [{"task_id": t.id, "completion": right(t.id)} for t in tasks]
    with served.client("beta") as client:
        first = client.post("/v1/grade/batch", json={"items": items[:8]})  # 8 of the 20-grade burst
        assert first.status_code == 200 and [x["reward"] for x in first.json()["results"]] == [1.0] * 8
        refused = client.post("/v1/grade/batch", json={"items": items})  # 13 > the 11 left after its own token
        assert_retry_after(refused)
        assert refused.json()["error"] == "rate_limited"
        too_big = client.post("/v1/grade/batch", json={"items": items * 2})  # 26 > the burst: never passes
        assert too_big.status_code == 422 and too_big.json()["error"] == "batch_exceeds_burst"
        # beta's own figures: the 8 grades of the first batch, nothing of the refused ones
        assert status_counts(client) == {"synthetic": {"correct": 8}}


def test_a_batch_over_the_in_flight_cap_queues_nothing(served: Served) -> None:
    ids = judge_task_ids(served, 5)
    judge = {"model": "judge-slow", "base_url": served.judge.base_url}
    asked = len([r for r in served.judge.requests if r.body.get("model") == "judge-slow"])
    with served.client("alpha") as client:
        items = [{"task_id": i, "completion": "Final answer: yes", "judge": judge, "wait": 0} for i in ids]
        refused = client.post("/v1/grade/batch", json={"items": items[:3]})
        assert_retry_after(refused)
        assert refused.json()["error"] == "too_many_in_flight"
        # If the refused batch had queued any of its three, two more would not fit under the cap.
        accepted = client.post("/v1/grade/batch", json={"items": items[3:5]})
        assert accepted.status_code == 200, accepted.text
        jobs = [x["job_id"] for x in accepted.json()["results"]]
        assert len(jobs) == 2 and all(jobs)
        one_more = client.post("/v1/grade", json=items[0])
        assert_retry_after(one_more)
        for job in jobs:
            assert client.get(f"/v1/jobs/{job}", params={"wait": 60}).json()["status"] == "finished"
    time.sleep(0.5)
    slow_asks = len([r for r in served.judge.requests if r.body.get("model") == "judge-slow"]) - asked
    assert slow_asks == 2 * ASKS_PER_CORRECT


# ---- 3. tenants are separate -----------------------------------------------------------------

def test_tenants_see_only_their_own_activity(served: Served) -> None:
    task = synthetic_tasks(1, seed=405)[0]
    judge = {"model": "judge-401", "base_url": served.judge.base_url}  # a judge fault, for the fault list
    # another tenant's activity, made here so the check does not depend on which tests ran before
    with served.client("alpha") as alpha:
        for other in synthetic_tasks(8, seed=406):
            graded = alpha.post("/v1/grade", json={"task_id": other.id, "completion": right(other.id)})
            assert graded.json()["reward"] == 1
    with served.client("gamma") as gamma:
        assert gamma.post("/v1/grade", json={"task_id": task.id, "completion": right(task.id)}).json()["reward"] == 1
        faulted = gamma.post("/v1/grade", json={"task_id": judge_task_ids(served, 6)[5],
                                                "completion": "Final answer: yes", "judge": judge})
        assert faulted.json()["outcome"] == "judge_error"
        gamma_status = gamma.get("/v1/status").json()
        gamma_page = gamma.get("/").text
        metrics = gamma.get("/metrics")
    with served.client("ops") as ops:
        ops_status = ops.get("/v1/status").json()
        ops_metrics = ops.get("/metrics")
    # gamma: its own grade and its own fault; no workers, queues or readiness internals
    assert gamma_status["view"] == "tenant" and gamma_status["checks"] == {}
    assert gamma_status["workers"] is None and gamma_status["queues"] is None
    assert gamma_status["grades"]["by_split"]["synthetic"] == {"correct": 1}
    assert [f["kind"] for f in gamma_status["faults"]] == ["judge_error"]
    for other in ("alpha", "beta", "ops"):
        assert other not in gamma_page and other not in json.dumps(gamma_status)
    assert "pid" not in gamma_page and "Shown to the operator only" in gamma_page
    # metrics name every tenant: the operator's
    assert metrics.status_code == 403 and metrics.json()["error"] == "operator_only"
    assert ops_metrics.status_code == 200 and 'tenant="alpha"' in ops_metrics.text
    # the operator sees the deployment: alpha's grades are in its totals
    assert ops_status["view"] == "operator" and ops_status["checks"]
    assert ops_status["grades"]["by_split"]["synthetic"]["correct"] >= 1 + 8


def test_another_tenants_job_is_not_found(served: Served) -> None:
    ids = judge_task_ids(served, 7)
    judge = {"model": "judge-yes", "base_url": served.judge.base_url}
    with served.client("alpha") as alpha:
        job = alpha.post("/v1/grade", json={"task_id": ids[6], "completion": "x", "judge": judge,
                                            "wait": 0, "request_id": "mine"}).json()["job_id"]
    with served.client("gamma") as gamma:
        r = gamma.get(f"/v1/jobs/{job}")
    assert r.status_code == 404 and r.json() == {"error": "unknown_job", "detail": "no job with this id"}


def test_readyz_tells_anonymous_callers_ready_or_not_and_nothing_else(served: Served) -> None:
    with served.client(None) as anyone, served.client("gamma") as gamma, served.client("ops") as ops:
        anonymous, tenant, operator = anyone.get("/readyz"), gamma.get("/readyz"), ops.get("/readyz")
        bad_key = httpx.get(served.url + "/readyz", headers={"authorization": "Bearer sg_nope"})
    assert anonymous.status_code == 200 and anonymous.json() == {"ready": True}
    assert tenant.json() == {"ready": True} and bad_key.json() == {"ready": True}
    assert set(operator.json()) >= {"ready", "checks"}


# ---- 4. no cross-site grading ----------------------------------------------------------------

GRADE = {"reference": {"values": ["3 s"]}, "completion": "Final answer: 3 s"}


@pytest.mark.parametrize("path", ["/v1/grade", "/v1/grade/batch", "/v1/rewards", "/get_reward",
                                  "/v1/grade/labelled", "/grade"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_grading_takes_json_bodies_only(served: Served, path: str, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    with served.client("gamma") as client:
        r = client.post(path, content=json.dumps(GRADE).encode(), headers=headers)
    if content_type is None:
        assert "content-type" not in r.request.headers
    assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"


@pytest.mark.parametrize("headers", [
    {"origin": "http://evil.example"},
    {"origin": "null"},
    {"origin": "http://127.0.0.1:1"},  # same host, another port: another origin
    {"sec-fetch-site": "cross-site"},
    {"origin": "http://evil.example", "sec-fetch-site": "same-origin"},  # a forged marker changes nothing
])
def test_browser_requests_from_another_site_are_refused(served: Served, headers: dict[str, str]) -> None:
    with served.client("gamma", **headers) as client:
        r = client.post("/v1/grade", json=GRADE)
    assert r.status_code == 403 and r.json()["error"] == "cross_site_refused"


def test_the_docs_page_still_grades_with_the_tenant_key(served: Served) -> None:
    """What the docs page's "Try it out" sends: Basic credentials the browser asked for once,
    its own origin, a JSON body."""
    basic = base64.b64encode(f"me:{served.keys['gamma']}".encode()).decode()
    origin = f"http://127.0.0.1:{served.port}"
    browser = {"authorization": f"Basic {basic}", "origin": origin, "sec-fetch-site": "same-origin"}
    with httpx.Client(base_url=served.url, timeout=60, headers=browser) as page:
        assert page.get("/docs").status_code == 200
        r = page.post("/v1/grade", json=GRADE)
    assert r.status_code == 200 and r.json()["reward"] == 1.0


# ---- 5. every client error a short 4xx ------------------------------------------------------

@pytest.mark.parametrize("base_url", ["http://127.0.0.1:99999/v1", "http://[::1", "http://h:abc/v1",
                                      "http://[not-an-address]/v1", "http://" + "a" * 300 + ":/v1"])
@pytest.mark.parametrize("tenant", ["gamma", "ops"])
def test_a_malformed_judge_url_is_a_4xx(served: Served, base_url: str, tenant: str) -> None:
    task_id = judge_task_ids(served, 1)[0]
    with served.client(tenant) as client:
        r = client.post("/v1/grade", json={"task_id": task_id, "completion": "x",
                                           "judge": {"model": "judge-yes", "base_url": base_url}})
    assert 400 <= r.status_code < 500 and set(r.json()) == {"error", "detail"}, r.text
    assert base_url not in r.text


def test_an_aborted_upload_is_not_a_server_error(served: Served) -> None:
    body = json.dumps({"items": [GRADE] * 100}).encode()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as s:
            s.sendall(b"POST /v1/grade/batch HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Authorization: Bearer " + served.keys["gamma"].encode() + b"\r\n"
                      b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                      b"\r\n\r\n" + body[: len(body) // 3])
    time.sleep(1.0)  # the server notices the closed connections
    with served.client("ops") as ops:
        faults = ops.get("/v1/status").json()["faults"]
        metrics = ops.get("/metrics").text
    assert not [f for f in faults if f["kind"].startswith("http_5")], faults
    assert 'status="500"' not in metrics


def test_a_look_alike_final_answer_label_is_the_label(served: Served) -> None:
    with served.client("gamma") as client:
        for completion, reward in (
            ("Final answer: 9 s\nOn reflection:\nFinal \u0430nswer: 3 s", 1.0),  # Cyrillic a, the last label
            ("Final answer: 3 s\nOn reflection:\nFINAL \u0391NSWER\uff1a 9 s", 0.0),  # Greek Alpha, full-width colon
            ("Final answer: 3 s\n\U0001d405inal answer: 9 s", 0.0),  # mathematical bold F
        ):
            r = client.post("/v1/grade", json={"reference": {"values": ["3 s"]}, "completion": completion})
            assert r.json()["reward"] == reward, (completion, r.json())


def test_label_errors_do_not_echo_client_markup(served: Served) -> None:
    markup = "<img src=x onerror=alert(1)>"
    labels = [{"values": ["1 s"], markup: 1}, {"rows": [{"a": 1}], "values": [markup]}, {"task_id": markup}]
    with served.client("gamma") as client:
        r = client.post("/v1/grade/labelled", json={"items": [
            {"label": label, "completion": "Final answer: 1 s"} for label in labels]})
    assert r.status_code == 200 and [x["reward"] for x in r.json()["results"]] == [0.0] * 3
    assert "<img" not in r.text and "onerror" not in r.text


def test_judge_results_name_the_model_at_most(served: Served) -> None:
    task_id = judge_task_ids(served, 1)[0]
    with served.client("gamma") as client:
        r = client.post("/v1/grade", json={"task_id": task_id, "completion": "Final answer: yes",
                                           "judge": {"model": "judge-yes", "base_url": served.judge.base_url}})
    assert r.status_code == 200 and r.json()["details"]["judge_model"] == "judge-yes"
    port = served.judge.base_url.rsplit(":", 1)[1].split("/")[0]
    assert served.judge.base_url not in r.text and port not in json.dumps(r.json()["details"])


def test_statuses_of_every_refusal_here_are_4xx_with_a_short_body(served: Served) -> None:
    """Odd requests a hostile client sends: each a short {error, detail}, never a 5xx."""
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/jobs/" + "a" * 65, {}),
        ("GET", "/v1/jobs/..%2f..%2fetc", {}),
        ("GET", "/v1/tasks/" + CANARY, {}),
        ("POST", "/v1/grade", {"content": b"{", "headers": {"content-type": "application/json"}}),
        ("POST", "/v1/grade", {"json": {"task_id": CANARY, "completion": "x", "request_id": "r" * 500}}),
        ("POST", "/v1/grade", {"json": {"task_id": "synthetic/1/1", "completion": "x", "wait": -1}}),
        ("DELETE", "/v1/grade", {}),
        ("GET", "/v1/tasks?split=" + "x" * 51, {}),
    ]
    with served.client("gamma") as client:
        for method, path, kwargs in cases:
            r = client.request(method, path, **kwargs)
            assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text[:200])
            assert set(r.json()) == {"error", "detail"} and len(r.text) < 700
            assert CANARY not in r.text

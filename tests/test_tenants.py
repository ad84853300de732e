"""Tenants through a real server process on a real Redis: keys, rate limits, isolation,
judge URL allow-lists, idempotency."""

from __future__ import annotations

import concurrent.futures
import re

import httpx
import pytest

from app.tasks.synthetic.bank import SyntheticBank
from app.tenants import new_key
from tests.support.redis_server import RedisServer
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # real workers, servers or sandboxes: left out of `make test-fast`


def _tenants_file(tmp_path):
    key_a, digest_a = new_key()
    key_b, digest_b = new_key()
    key_c, digest_c = new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(f'''
[[tenant]]
name = "alpha"
key_sha256 = ["{digest_a}"]
rate_per_second = 1000
burst = 1000
max_in_flight = 2
operator = true
judge_model = "judge-small"
judge_base_urls = ["http://127.0.0.1:9/v1"]

[[tenant]]
name = "beta"
key_sha256 = "{digest_b}"
rate_per_second = 0.5
burst = 3

[[tenant]]
name = "gamma"
key_sha256 = "{digest_c}"
rate_per_second = 0.01
burst = 3

[[tenant]]
name = "delta"
key_sha256 = "{DELTA_DIGEST}"
rate_per_second = 0.01
burst = 3
''')
    return path, key_a, key_b, key_c


# A tenant of its own for the test of reads against grading budgets (the fixture's tuple is
# unpacked by every test here).
DELTA_KEY, DELTA_DIGEST = new_key()


# One server (and Redis) for the module: starting one costs seconds, and no test changes what
# another sees. The rate-limit test drains the bucket of a tenant ("gamma") no other test uses; it
# refills a token per 100 s, so a loaded machine's slow requests cannot refill it mid-test.
@pytest.fixture(scope="module")
def tenant_server(tmp_path_factory):
    path, key_a, key_b, key_c = _tenants_file(tmp_path_factory.mktemp("tenants"))
    redis_server = RedisServer().start()
    env = {"SCALING_GRADER_TENANTS_FILE": str(path), "SCALING_GRADER_REDIS_URL": redis_server.url}
    try:
        with running_server(env) as url:
            yield url, key_a, key_b, key_c
    finally:
        redis_server.close()


def _correct(task_id: str) -> dict:
    gold = SyntheticBank().get(task_id).gold
    return {"task_id": task_id, "completion": "Final answer: " + ", ".join(gold)}


def test_missing_or_wrong_key_is_401_and_health_stays_open(tenant_server) -> None:
    url, key_a, _, _ = tenant_server
    assert httpx.get(url + "/healthz").status_code == 200
    assert httpx.get(url + "/readyz").status_code in (200, 503)  # open (503 here: no impl worker runs)
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": key_a}, {"Authorization": "Basic x"}):
        r = httpx.post(url + "/v1/grade", json=_correct("synthetic/0/0"), headers=headers)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(url + "/v1/tasks", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(url + "/metrics").status_code == 401
    ok = httpx.post(url + "/v1/grade", json=_correct("synthetic/0/0"), headers={"Authorization": f"Bearer {key_a}"})
    assert ok.status_code == 200 and ok.json()["reward"] == 1.0


def test_rate_limit_gives_429_with_retry_after(tenant_server) -> None:
    url, _, _, key_c = tenant_server
    headers = {"Authorization": f"Bearer {key_c}"}
    statuses = [httpx.get(url + "/v1/splits", headers=headers).status_code for _ in range(6)]
    assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:]
    r = httpx.get(url + "/v1/splits", headers=headers)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1


def test_reads_and_grades_draw_on_budgets_of_their_own(tenant_server) -> None:
    # A trainer waiting for its results (GETs) must not spend the grades it may ask for, and
    # grading must not starve its reads: the two buckets are apart, each the tenant's size.
    url = tenant_server[0]
    headers = {"Authorization": f"Bearer {DELTA_KEY}"}
    reads = [httpx.get(url + "/v1/splits", headers=headers).status_code for _ in range(4)]
    assert reads == [200, 200, 200, 429]  # the burst of 3, then dry (a token per 100 s)
    body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"}
    grades = [httpx.post(url + "/v1/grade", json=body, headers=headers).status_code for _ in range(4)]
    assert grades == [200, 200, 200, 429]  # the grading budget was untouched by the reads
    assert httpx.get(url + "/v1/splits", headers=headers).status_code == 429  # nor the reads' by grading


def test_a_tenant_sees_only_its_own_jobs(tenant_server) -> None:
    url, key_a, key_b, _ = tenant_server
    a, b = {"Authorization": f"Bearer {key_a}"}, {"Authorization": f"Bearer {key_b}"}
    r = httpx.post(url + "/v1/grade", json={**_correct("synthetic/0/1"), "request_id": "run-1"}, headers=a)
    job_id = r.json()["job_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", job_id)
    mine = httpx.get(f"{url}/v1/jobs/{job_id}", headers=a).json()
    assert mine["status"] == "finished" and mine["result"]["reward"] == 1.0
    theirs = httpx.get(f"{url}/v1/jobs/{job_id}", headers=b)
    assert theirs.status_code == 404
    # the same request id used by another tenant is another job
    r_b = httpx.post(url + "/v1/grade", json={**_correct("synthetic/0/1"), "request_id": "run-1"}, headers=b)
    assert r_b.json()["job_id"] != job_id


def test_judge_url_outside_the_tenant_list_is_refused(tenant_server) -> None:
    url, key_a, _, _ = tenant_server
    body = {**_correct("synthetic/0/2"), "judge": {"model": "m", "base_url": "http://169.254.169.254/v1"}}
    r = httpx.post(url + "/v1/grade", json=body, headers={"Authorization": f"Bearer {key_a}"})
    assert r.status_code == 403 and r.json()["error"] == "judge_not_allowed"


def test_same_request_id_ten_times_concurrently_runs_once(tenant_server) -> None:
    url, key_a, _, _ = tenant_server
    headers = {"Authorization": f"Bearer {key_a}"}

    def graded_count() -> float:
        text = httpx.get(url + "/metrics", headers=headers).text
        m = re.search(r'scaling_grader_grades_total\{grading="numeric",outcome="correct",split="synthetic"\} (\S+)',
                      text)
        return float(m.group(1)) if m else 0.0

    before = graded_count()
    body = {**_correct("synthetic/5/5"), "request_id": "same-id-10"}
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        responses = list(pool.map(lambda _: httpx.post(url + "/v1/grade", json=body, headers=headers), range(10)))
    assert all(r.status_code == 200 for r in responses)
    assert len({r.json()["job_id"] for r in responses}) == 1
    assert all(r.json()["reward"] == 1.0 for r in responses)
    assert graded_count() - before == 1
    changed = {**body, "completion": "Final answer: 1 s"}
    conflict = httpx.post(url + "/v1/grade", json=changed, headers=headers)
    assert conflict.status_code == 409 and conflict.json()["error"] == "request_id_reused"


def test_tenant_usage_is_counted_in_metrics(tenant_server) -> None:
    url, key_a, _, _ = tenant_server
    headers = {"Authorization": f"Bearer {key_a}"}
    httpx.get(url + "/v1/splits", headers=headers)
    assert 'scaling_grader_tenant_requests_total{tenant="alpha"}' in httpx.get(url + "/metrics", headers=headers).text


def test_tenant_judge_urls_compare_in_canonical_form(tenant_server) -> None:
    """The tenant lists http://127.0.0.1:9/v1; a trailing slash or upper-case scheme is the same
    endpoint and must not be refused by the tenant check (the judge itself is unreachable, so the
    grade ends as an unscored judge fault or refusal, never a 403)."""
    url, key_a, _, _ = tenant_server
    body = {**_correct("synthetic/0/3"), "judge": {"model": "m", "base_url": "HTTP://127.0.0.1:9/v1/"}}
    r = httpx.post(url + "/v1/grade", json=body, headers={"Authorization": f"Bearer {key_a}"})
    assert r.status_code == 200 and r.json()["reward"] == 1.0

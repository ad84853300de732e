"""Queued (impl) grading on real Redis servers with real worker processes: killed workers,
Redis restarts, Redis outages, in-flight caps. No job a client submitted may be lost."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, RIGHT, collect, completion
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers or sandboxes: left out of `make test-fast`

# Plausibly wrong: forgets that int8 weights halve the bytes per weight.
WRONG = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math\n"
    "    return math.ceil(peak_flops / hbm_bandwidth)\n"
)


KILL_TEST_JOBS = 8  # jobs left for the survivor once the victim is killed holding one


def _held_by(redis_server: RedisServer, worker: str, job_ids: list[str]) -> str | None:
    """A job the named worker is running now (RQ's own record of the job), or None."""
    client = redis_server.client()
    for job_id in job_ids:
        name, status = client.hmget(f"rq:job:{job_id}", "worker_name", "status")
        if name == worker.encode() and status == b"started":
            return job_id
    return None


def test_killed_worker_loses_no_job(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        submitted = {}
        for i in range(KILL_TEST_JOBS):
            body = {"task_id": f"impl/{EXERCISE}", "completion": RIGHT if i % 4 else WRONG, "wait": 0,
                    "request_id": f"kill-test-{i}", "all_or_nothing": True}
            r = client.post("/v1/grade", json=body)
            assert r.status_code == 202, r.text
            submitted[r.json()["job_id"]] = i % 4 != 0
        assert len(submitted) == KILL_TEST_JOBS
        victim = start_worker(redis_server.url, "victim", FAST_QUEUE)
        survivor = start_worker(redis_server.url, "survivor", FAST_QUEUE)
        try:
            # kill the first worker while it is in the middle of a job
            deadline = time.monotonic() + 60
            held = None
            while time.monotonic() < deadline and held is None:
                held = _held_by(redis_server, "victim", list(submitted))
                time.sleep(0.05)
            assert held is not None, "the victim never took a job"
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
            results = collect(client, list(submitted), timeout=240)
        finally:
            stop_worker(victim)
            stop_worker(survivor)
        assert len(results) == KILL_TEST_JOBS, f"only {len(results)} of {KILL_TEST_JOBS} results arrived"
        for job_id, body in results.items():
            assert body["status"] == "finished"
            expected_reward = 1.0 if submitted[job_id] else 0.0
            assert body["result"]["reward"] == expected_reward, body["result"]["explanation"]
        # none ran twice, except the one job the killed worker held (re-run on the survivor)
        reruns = sum(body["result"]["details"]["attempt"] - 1 for body in results.values())
        assert reruns <= 1


def test_jobs_survive_a_redis_restart(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        job_ids = []
        for _ in range(6):
            r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 0})
            assert r.status_code == 202
            job_ids.append(r.json()["job_id"])
        redis_server.stop()
        unavailable = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 0})
        assert unavailable.status_code == 503
        redis_server.start()  # same port, same directory: the AOF brings the queue back
        worker = start_worker(redis_server.url, "after-restart", FAST_QUEUE)
        try:
            results = collect(client, job_ids, timeout=120)
        finally:
            stop_worker(worker)
        assert len(results) == 6 and all(b["result"]["reward"] == 1.0 for b in results.values())


def test_redis_outage_keeps_inline_grading_and_recovers() -> None:
    server = RedisServer()  # configured but not started: unreachable
    env = {"SCALING_GRADER_REDIS_URL": server.url, **FAST_QUEUE}
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
            body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s", "request_id": "outage"}
            numeric = client.post("/v1/grade", json=body)
            assert numeric.status_code == 200 and numeric.json()["reward"] == 1.0
            queued = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT})
            assert queued.status_code == 503 and "Redis is unreachable" in queued.json()["detail"]
            assert queued.headers["retry-after"]
            ready = client.get("/readyz")
            assert ready.status_code == 503 and "unreachable" in ready.json()["checks"]["queue"]["info"]
            server.start()
            worker = start_worker(server.url, "recovered", FAST_QUEUE)
            try:
                deadline = time.monotonic() + 120  # ready once the worker's presence is published
                while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert client.get("/readyz").status_code == 200
                r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 120})
                assert r.status_code == 200 and r.json()["reward"] == 1.0
            finally:
                stop_worker(worker)
    finally:
        server.close()


def test_in_flight_cap_per_tenant(tmp_path, redis_server) -> None:
    from app.tenants import new_key

    key, digest = new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "capped"\nkey_sha256 = "{digest}"\nmax_in_flight = 2\n')
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, "SCALING_GRADER_TENANTS_FILE": str(path)}
    with running_server(env) as url:
        headers = {"Authorization": f"Bearer {key}"}
        statuses = [httpx.post(url + "/v1/grade", headers=headers,
                               json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 0}).status_code
                    for _ in range(3)]
        assert statuses == [202, 202, 429]


@pytest.mark.parametrize("backend", ["embedded", "redis"])
def test_wait_returns_202_then_the_job_endpoint_has_the_result(backend, redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE} if backend == "redis" else dict(FAST_QUEUE)
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        worker = start_worker(redis_server.url, "waiter", FAST_QUEUE) if backend == "redis" else None
        try:
            r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 0})
            assert r.status_code == 202 and r.json()["poll"] == f"/v1/jobs/{r.json()['job_id']}"
            done = client.get(r.json()["poll"], params={"wait": 60}).json()
            assert done["status"] == "finished" and done["result"]["reward"] == 1.0
            assert done["result"]["details"]["sandbox_tier"]
        finally:
            if worker is not None:
                stop_worker(worker)


@pytest.mark.parametrize("backend", ["embedded", "redis"])
def test_same_request_id_ten_times_concurrently_queues_once(backend, redis_server) -> None:
    import concurrent.futures

    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE} if backend == "redis" else dict(FAST_QUEUE)
    with running_server(env) as url:
        worker = start_worker(redis_server.url, "idem", FAST_QUEUE) if backend == "redis" else None
        graded = 'scaling_grader_grades_total{grading="impl",outcome="correct",split="impl"} 1.0'
        try:
            body = {"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "request_id": "impl-once", "wait": 120}
            with concurrent.futures.ThreadPoolExecutor(10) as pool:
                responses = list(pool.map(lambda _: httpx.post(url + "/v1/grade", json=body, timeout=180), range(10)))
            metrics = httpx.get(url + "/metrics").text
        finally:
            if worker is not None:
                stop_worker(worker)
        assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
        results = [r.json() for r in responses]
        assert len({r["job_id"] for r in results}) == 1
        assert all(r["reward"] == 1.0 for r in results)
        if backend == "redis":
            assert {r["details"]["attempt"] for r in results} == {1}  # the job ran exactly once
        else:  # embedded: graded in the API process, whose metrics count it once
            assert graded in metrics
        assert redis_server.client().llen("rq:queue:impl") == 0


def test_worker_serves_its_own_metrics(redis_server) -> None:
    from tests.support.server import free_port

    port = free_port()
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url:
        worker = start_worker(redis_server.url, "metered", FAST_QUEUE, args=("--metrics-port", str(port)))
        try:
            r = httpx.post(url + "/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 120},
                           timeout=180)
            assert r.status_code == 200 and r.json()["reward"] == 1.0
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        finally:
            stop_worker(worker)
    assert 'scaling_grader_grade_seconds_count{grading="impl"} 1.0' in metrics
    # counted once, in the ledger the API's /metrics reads (with the result's write), not here again
    assert "scaling_grader_grades_total" not in metrics

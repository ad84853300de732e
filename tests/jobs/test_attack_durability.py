"""Attacks on the Redis deployment's durability (real Redis, real workers, a real API): what a
Redis that loses its data (a restart without persistence, FLUSHALL, a fresh volume) does to the
case secret, and so to rewards, and to the jobs a client was told were accepted."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.jobs.test_case_secret import HALF_RIGHT
from tests.jobs.test_write_once import SLOW_RIGHT, _grading, _until
from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, collect
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers and sandboxes


@pytest.fixture
def volatile_redis():
    """A Redis without persistence: a restart comes back empty, as after FLUSHALL or a lost volume."""
    server = RedisServer(appendonly=False).start()
    try:
        yield server
    finally:
        server.close()


def _post(client: httpx.Client, request_id: str, text: str, wait: float = 0) -> httpx.Response:
    return client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": text, "wait": wait,
                                          "request_id": request_id})


def _finished(client: httpx.Client, job_id: str, timeout: float = 180) -> dict:
    bodies = collect(client, [job_id], timeout)
    assert job_id in bodies, f"job {job_id} did not end"
    return bodies[job_id]


def _lose_data(server: RedisServer, client: httpx.Client) -> None:
    server.stop()
    server.start()  # no AOF, no RDB: empty
    assert server.client().dbsize() == 0
    _until(lambda: client.get("/readyz").status_code == 200, 60, "the API to reach Redis again")


def test_the_same_completion_keeps_its_hidden_cases_after_redis_loses_its_data(volatile_redis) -> None:
    # No case secret configured (as `make stack` runs): the secret lives only in Redis.
    env = {"SCALING_GRADER_REDIS_URL": volatile_redis.url, **FAST_QUEUE}
    worker = start_worker(volatile_redis.url, "secret-keeper", FAST_QUEUE)
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
            r = _post(client, "before-loss", HALF_RIGHT)
            assert r.status_code == 202, r.text
            before = _finished(client, r.json()["job_id"])["result"]
            _lose_data(volatile_redis, client)
            r = _post(client, "after-loss", HALF_RIGHT)
            assert r.status_code == 202, r.text
            after = _finished(client, r.json()["job_id"])["result"]
    finally:
        stop_worker(worker)
    # The same completion of the same task must draw the same hidden cases (and so earn the same
    # reward) for the life of the deployment; a new random secret in the emptied Redis re-draws them.
    assert after["details"]["case_seed"] == before["details"]["case_seed"], (before["reward"], after["reward"])


def test_jobs_accepted_before_redis_loses_its_data_do_not_become_unknown(volatile_redis) -> None:
    env = {"SCALING_GRADER_REDIS_URL": volatile_redis.url, **FAST_QUEUE}
    worker = start_worker(volatile_redis.url, "lossy", FAST_QUEUE)
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
            job_ids = []
            for i in range(3):
                r = _post(client, f"accepted-{i}", SLOW_RIGHT)
                assert r.status_code == 202, r.text
                job_ids.append(r.json()["job_id"])
            _until(lambda: _grading(volatile_redis, "lossy", job_ids[0]), 120, "the worker to start grading")
            _lose_data(volatile_redis, client)
            time.sleep(15)  # the held attempt ends and writes its result
            answers = {job_id: client.get(f"/v1/jobs/{job_id}", params={"wait": 0}) for job_id in job_ids}
    finally:
        stop_worker(worker)
    # Each job was accepted with a 202; the client must learn its result or that it failed, not be
    # told the job never existed (404) while the worker that held it wrote a result nobody can read.
    codes = {job_id: answer.status_code for job_id, answer in answers.items()}
    assert all(code == 200 for code in codes.values()), codes

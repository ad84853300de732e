"""Attacks on the Redis deployment's durability (real Redis, real workers, a real API): what a
Redis that loses its data (a restart without persistence, FLUSHALL, a fresh volume) does to the
case secret, and so to rewards, and to the jobs a client was told were accepted."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.jobs.test_case_secret import HALF_RIGHT
from tests.jobs.test_write_once import SLOW_RIGHT, _grading
from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, RIGHT, collect, until
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.tcp_proxy import PausableProxy
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


class StrikeAfterClaimProxy(PausableProxy):
    """A fault at the worst moment: right after Redis answered the API's write of a job's
    owner and idempotency record (the claim), before the job is queued, ``strike`` runs (kills Redis)."""

    def __init__(self, target_port: int, strike: Callable[[], None]) -> None:
        super().__init__(target_port)
        self.strike = strike
        self.struck = threading.Event()

    def _forward(self, data: bytes, from_client: bool, to: socket.socket, state: dict) -> bool:
        to.sendall(data)
        if from_client and b"sg:owner:" in data and not self.struck.is_set():
            state["claimed"] = True
        elif not from_client and state.get("claimed"):
            self.struck.set()  # the claim's answer went back: strike now
            self.strike()
            state["claimed"] = False
        return True


def _post(client: httpx.Client, request_id: str, text: str, wait: float = 0) -> httpx.Response:
    return client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": text, "wait": wait,
                                          "request_id": request_id})


def _finished(client: httpx.Client, job_id: str, timeout: float = 180) -> dict:
    bodies = collect(client, [job_id], timeout)
    assert job_id in bodies, f"job {job_id} did not end"
    return bodies[job_id]


def _lose_data(server: RedisServer, client: httpx.Client) -> None:
    server.client().set("test:marker", "before the loss")
    server.stop()
    server.start()  # no AOF, no RDB: empty
    # (the API and the worker's lanes reconnect at once and write again: the marker is what shows
    # that what was there before is gone)
    assert server.client().get("test:marker") is None
    until(lambda: client.get("/readyz").status_code == 200, 60, "the API to reach Redis again")


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
            until(lambda: _grading(volatile_redis, "lossy", job_ids[0]), 120, "the worker to start grading")
            _lose_data(volatile_redis, client)
            time.sleep(15)  # the held attempt ends and writes its result
            answers = {job_id: client.get(f"/v1/jobs/{job_id}", params={"wait": 0}) for job_id in job_ids}
    finally:
        stop_worker(worker)
    # Each job was accepted with a 202; the client must learn its result or that it was lost, not
    # be told the job never existed (404). What can honestly be promised without persistence: the
    # job the worker held writes its result after the loss, and the API serves it (200); the jobs
    # that waited in the emptied queue are gone, and say so (410 job_lost: resubmit). With AOF
    # (docs/deployment.md) none is lost.
    codes = {job_id: answer.status_code for job_id, answer in answers.items()}
    assert codes[job_ids[0]] == 200, codes
    assert answers[job_ids[0]].json()["result"]["reward"] == 1.0
    for job_id in job_ids[1:]:
        assert codes[job_id] == 410 and answers[job_id].json()["error"] == "job_lost", codes
        assert "resubmit" in answers[job_id].text
    assert 404 not in codes.values(), codes


def test_redis_dying_between_claim_and_enqueue_does_not_leave_a_job_queued_forever(redis_server) -> None:
    def kill_redis() -> None:  # a crash (OOM kill, host reboot); the AOF (fsync always) keeps the claim
        assert redis_server.process is not None
        redis_server.process.kill()
        redis_server.process.wait()
        redis_server.process = None

    # The API reaches Redis through the proxy (which only watches); the worker directly.
    proxy = StrikeAfterClaimProxy(redis_server.port, kill_redis)
    env = {"SCALING_GRADER_REDIS_URL": proxy.url, **FAST_QUEUE}
    worker: subprocess.Popen | None = None
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=180) as client:
            first = _post(client, "killed-at-claim", RIGHT)
            assert proxy.struck.is_set()
            assert first.status_code == 503, first.text  # the client is told to retry
            redis_server.start()
            worker = start_worker(redis_server.url, "bystander", FAST_QUEUE)
            try:
                until(lambda: client.get("/readyz").status_code == 200, 120, "the API to reach Redis and a worker")
            except AssertionError:
                raise AssertionError(client.get("/readyz").text) from None
            # The client retries the same request, as a 503 tells it to, and waits for the result.
            retry = _post(client, "killed-at-claim", RIGHT)
            assert retry.status_code in (200, 202), retry.text
            job_id = retry.json().get("job_id") or retry.json()["result"]["job_id"]
            bodies = collect(client, [job_id], timeout=90)
            queued_in_rq = redis_server.client().exists(f"rq:job:{job_id}")
    finally:
        if worker is not None:
            stop_worker(worker)
        proxy.close()
    # The retry was accepted, but the job was never queued: the claim the first attempt left (owner
    # and idempotency records, kept 7 days) makes every retry wait on a job that does not exist.
    assert job_id in bodies, f"retried job {job_id} never ended (in RQ: {bool(queued_in_rq)})"
    assert bodies[job_id]["result"]["reward"] == 1.0

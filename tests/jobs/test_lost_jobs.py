"""On a real Redis: what a claim whose job was never queued, and a job Redis lost, look like to
the API (app.jobs.redis_jobs); an idle worker putting back the case secret Redis lost; and the
test proxy refusing a client while Redis is down."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import redis

from app.errors import ApiError
from app.jobs import keys
from app.jobs.base import job_id_for
from app.jobs.case_secret import KEY
from app.jobs.redis_jobs import IssuedJobs, RedisJobs
from app.settings import Settings
from tests.support.impl_jobs import FAST_QUEUE
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import PausableProxy
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # a Redis server per test


def test_concurrent_retries_of_a_never_queued_claim_queue_it_once(redis_server: RedisServer) -> None:
    settings = Settings(redis_url=redis_server.url)
    connection = redis_server.client()

    async def run() -> None:
        replicas = [RedisJobs(settings, print) for _ in range(3)]  # retries reach different API replicas
        try:
            first = await replicas[0].claim("t", "crashed", "digest")
            assert first.new  # then Redis died before the enqueue: the claim stays, no job does
            assert not connection.exists(keys.rq_job(first.job_id))
            retries = await asyncio.gather(*(r.claim("t", "crashed", "digest") for r in replicas for _ in range(4)))
            assert {c.job_id for c in retries} == {first.job_id}
            assert sum(c.new for c in retries) == 1  # exactly one retry queues it
            # a claim whose job is queued, or has a result, is never queued again
            connection.hset(keys.rq_job(first.job_id), "status", "queued")
            connection.delete(keys.requeue(first.job_id))
            assert not (await replicas[1].claim("t", "crashed", "digest")).new
            connection.delete(keys.rq_job(first.job_id))
            connection.set(keys.result(first.job_id), "{}")
            assert not (await replicas[1].claim("t", "crashed", "digest")).new
            with pytest.raises(ApiError) as reused:  # another body under the same request_id
                await replicas[2].claim("t", "crashed", "other")
            assert reused.value.status == 409
        finally:
            for r in replicas:
                await r.close()

    asyncio.run(run())


def test_a_lost_job_is_410_to_its_tenant_and_unknown_to_anyone_else(redis_server: RedisServer) -> None:
    settings = Settings(redis_url=redis_server.url)
    connection = redis_server.client()

    async def run() -> None:
        jobs, other_replica = RedisJobs(settings, print), RedisJobs(settings, print)
        try:
            claim = await jobs.claim("t", "accepted", "digest")
            connection.flushall()  # Redis lost its data
            with pytest.raises(ApiError) as lost:
                await jobs.view("t", claim.job_id, 0)
            assert lost.value.status == 410 and lost.value.error == "job_lost"
            assert await jobs.view("someone-else", claim.job_id, 0) is None  # 404: no hint it existed
            assert await jobs.view("t", job_id_for("t", "never-sent"), 0) is None
            # a replica that did not hand the id out cannot tell it from one never issued
            assert await other_replica.view("t", claim.job_id, 0) is None
            # the attempt that held it writes its result after the loss: served to its tenant
            connection.set(keys.result(claim.job_id),
                           '{"grading": "impl", "outcome": "correct", "reward": 1.0, "explanation": "ok"}')
            view = await jobs.view("t", claim.job_id, 0)
            assert view is not None and view.status == "finished" and view.result is not None
            assert view.result.reward == 1.0
            assert await jobs.view("someone-else", claim.job_id, 0) is None
        finally:
            await jobs.close()
            await other_replica.close()

    asyncio.run(run())


def test_the_issued_memory_is_bounded() -> None:
    issued = IssuedJobs(capacity=3)
    for i in range(5):
        issued.note(f"job-{i}", "t")
    assert [issued.owner(f"job-{i}") for i in range(5)] == [None, None, "t", "t", "t"]


def test_the_proxy_refuses_a_client_while_the_server_is_down_and_serves_the_next(redis_server: RedisServer) -> None:
    proxy = PausableProxy(redis_server.port)
    try:
        redis_server.stop()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as refused:
            refused.settimeout(5)
            assert refused.recv(1) == b""  # closed at once: nothing to relay to
        redis_server.start()
        assert redis.Redis.from_url(proxy.url, socket_timeout=5).ping()
    finally:
        proxy.close()


def test_an_idle_worker_puts_the_case_secret_back_after_redis_loses_it(redis_server: RedisServer) -> None:
    connection = redis_server.client()
    worker = start_worker(redis_server.url, "keeper", {**FAST_QUEUE, "SCALING_GRADER_IMPL__CASE_SECRET": ""},
                          queues="judge")
    try:
        deadline = time.monotonic() + 120
        while connection.get(KEY) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        held = connection.get(KEY)
        assert held is not None, "the worker did not read the secret when it started"
        connection.flushall()
        deadline = time.monotonic() + 60  # its maintenance (every second here) puts it back, no job needed
        while connection.get(KEY) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert connection.get(KEY) == held
    finally:
        stop_worker(worker)

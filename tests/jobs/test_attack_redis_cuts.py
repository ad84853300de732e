"""Attacks on the cuts of Redis commands per queued job (results woken only by the subscription,
reads limited per API process, the in-flight prune only at the cap, the first attempt in one SET,
no RQ execution records), on a real Redis, in process where that is enough and with a real API
server where the HTTP layer is the target."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry
from rq.serializers import JSONSerializer

from app.errors import ApiError
from app.jobs import keys
from app.jobs.leases import Lease, new_token
from app.jobs.redis_jobs import RedisJobs
from app.jobs.result_notices import ResultNotices
from app.jobs.worker_registry import running_jobs
from app.ratelimit import RateLimiter
from app.settings import Settings
from app.tenants import new_key
from tests.support.forked import report_from_fork
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.tcp_proxy import PausableProxy
from worker.grading_worker import GradingWorker

pytestmark = pytest.mark.slow  # a Redis server per test

RESULT = b'{"reward": 1.0}'


def raises() -> None:
    """A job (importable by name, as RQ needs) that fails."""
    raise RuntimeError("this job fails")


def sleeps(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def _write_result(server: RedisServer, job_id: str) -> None:
    """What a worker's publish does: the result, then its announcement."""
    connection = server.client()
    connection.set(keys.result(job_id), RESULT, ex=60)
    connection.publish(keys.RESULTS_CHANNEL, job_id.encode() + b"\n" + RESULT)


async def _waiting(notices: ResultNotices, direct: aioredis.Redis, job_id: str, wait: float) -> asyncio.Task:
    async def read() -> Any:
        return await direct.get(keys.result(job_id))
    return asyncio.create_task(notices.wait_for(job_id, read, wait))


def _with_api_client_through_a_proxy(redis_server: RedisServer, scenario: Any) -> tuple[Any, float]:
    """Runs ``scenario(proxy, notices, direct)``: the API's own client (its retries and keepalive)
    reaches Redis through a pausable proxy; ``direct`` reads and writes past it."""
    proxy = PausableProxy(redis_server.port)

    async def run() -> tuple[Any, float]:
        via_proxy, direct = RedisJobs(Settings(redis_url=proxy.url), print), aioredis.Redis.from_url(redis_server.url)
        try:
            return await scenario(proxy, via_proxy.notices, direct)
        finally:
            await via_proxy.close()
            await direct.aclose()

    try:
        return asyncio.run(run())
    finally:
        proxy.close()


# ------------------------------------------------------------------ results woken by the subscription


def test_a_result_written_before_the_first_subscription_is_confirmed_is_read(redis_server: RedisServer) -> None:
    # The subscription is held up (its bytes stuck in a partition) past the first waiter's 1 s:
    # the waiter reads (nothing), the result is written and announced to nobody; the
    # confirmation, when it comes, must make the waiter read again.
    async def scenario(proxy: PausableProxy, notices: ResultNotices, direct: Any) -> tuple[Any, float]:
        proxy.pause()
        started = time.monotonic()
        task = await _waiting(notices, direct, "early", 30)
        await asyncio.sleep(1.5)  # past the first waiter's wait for the subscription, and its first read
        assert not task.done()
        _write_result(redis_server, "early")  # announced while nobody is subscribed
        await asyncio.sleep(0.5)
        proxy.resume()
        return await task, time.monotonic() - started

    found, took = _with_api_client_through_a_proxy(redis_server, scenario)
    assert found == RESULT and took < 10, (found, took)


def test_a_result_announced_while_the_subscription_is_dropped_unseen_is_read(redis_server: RedisServer) -> None:
    # Redis drops the subscriber (CLIENT KILL) while a partition hides it from the API; the result
    # is announced meanwhile. When the partition heals the drop shows, and the re-subscription's
    # confirmation must wake the waiter to read.
    async def scenario(proxy: PausableProxy, notices: ResultNotices, direct: Any) -> tuple[Any, float]:
        task = await _waiting(notices, direct, "dropped", 40)
        await asyncio.sleep(0.5)  # subscribed, first read done
        proxy.pause()
        assert redis_server.client().execute_command("CLIENT", "KILL", "TYPE", "pubsub") >= 1
        _write_result(redis_server, "dropped")
        started = time.monotonic()
        await asyncio.sleep(1.0)
        assert not task.done()
        proxy.resume()
        return await task, time.monotonic() - started

    found, took = _with_api_client_through_a_proxy(redis_server, scenario)
    assert found == RESULT and took < 10, (found, took)


def test_a_listener_that_fails_on_a_malformed_announcement_still_delivers(redis_server: RedisServer) -> None:
    # A non-UTF-8 job id on the channel breaks the listener (not a Redis error); a result
    # announced while it subscribes again is missed, and must still reach its waiter.
    async def run() -> tuple[Any, float]:
        client = aioredis.Redis.from_url(redis_server.url)
        notices = ResultNotices(client)
        try:
            task = await _waiting(notices, client, "after-crash", 30)
            await asyncio.sleep(0.5)
            redis_server.client().publish(keys.RESULTS_CHANNEL, b"\xff\xfe\nnot a result")
            await asyncio.sleep(0.1)  # the listener failed and pauses before subscribing again
            started = time.monotonic()
            _write_result(redis_server, "after-crash")
            return await task, time.monotonic() - started
        finally:
            await notices.close()
            await client.aclose()

    found, took = asyncio.run(run())
    assert found == RESULT and took < 5, (found, took)


def _keepalive_timer(port: int) -> bool:
    """Whether the kernel runs a keepalive timer (/proc/net/tcp "tr" 2) on the local socket of
    that port: SO_KEEPALIVE is on."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":  # established
            return fields[5].split(":")[0] == "02"
    raise AssertionError(f"no socket on local port {port}")


def test_the_api_s_subscription_has_tcp_keepalive(redis_server: RedisServer) -> None:
    # the one guard left against a subscription whose peer went away without a word
    settings = Settings(redis_url=redis_server.url)

    async def run() -> bool:
        jobs = RedisJobs(settings, print)
        try:
            await jobs.notices.wait_for("probe", lambda: jobs._stored("probe"), 0.3)
            [client] = redis_server.client().client_list(_type="pubsub")
            return _keepalive_timer(int(client["addr"].rsplit(":", 1)[1]))
        finally:
            await jobs.close()

    assert asyncio.run(run())


# ------------------------------------------------------------------ rate limits


def test_a_tenants_reads_never_draw_on_another_tenants_fallback_bucket() -> None:
    # While Redis is away each process falls back to buckets of its own, named by tenant; reads
    # always use buckets of their own. Tenant "alice"'s reads must not spend the grades of a
    # tenant named "local:alice" (the reads' names must not meet the fallback's).
    async def run() -> tuple[list[float], list[float]]:
        limiter = RateLimiter(aioredis.Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.5))
        try:
            reads = [await limiter.take("alice", 0.001, 2, shared=False) for _ in range(2)]
            grades = [await limiter.take("local:alice", 0.001, 2) for _ in range(2)]
            return reads, grades
        finally:
            assert limiter.redis is not None
            await limiter.redis.aclose()

    reads, grades = asyncio.run(run())
    assert reads == [0.0, 0.0]
    assert grades == [0.0, 0.0], "another tenant's reads spent this tenant's grading budget"


def _raw(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_no_method_trick_grades_past_the_grading_budget(tmp_path: Path, redis_server: RedisServer) -> None:
    # A tenant whose grading budget is spent (one batch of its whole burst) tries every way to
    # reach a grading route as a read, which its per-process read bucket, still full, lets
    # through: none may grade.
    key, digest = new_key()
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "tricky"\nkey_sha256 = "{digest}"\nrate_per_second = 0.001\nburst = 40\n')
    env = {"SCALING_GRADER_TENANTS_FILE": str(tenants), "SCALING_GRADER_REDIS_URL": redis_server.url}
    auth = {"Authorization": f"Bearer {key}"}
    body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"}
    with running_server(env) as url, httpx.Client(base_url=url, headers=auth, timeout=30) as client:
        assert client.post("/v1/grade/batch", json={"items": [body] * 40}).status_code == 200
        assert client.post("/v1/grade", json=body).status_code == 429
        answers = []
        for path in ("/v1/grade", "/grade", "/v1/grade/batch", "/v1/rewards", "/get_reward", "/v1/grade/labelled"):
            for method in ("GET", "HEAD", "OPTIONS"):
                r = client.request(method, path, json=body)
                answers.append((method, path, r.status_code, r.text))
            for header in ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"):
                r = client.request("GET", path, params={"_method": "POST"}, json=body, headers={header: "POST"})
                answers.append((header, path, r.status_code, r.text))
        raw_body = httpx.Request("POST", url, json=body).content
        for verb in (b"post", b"Post", b"get"):
            reply = _raw(url, verb + b" /v1/grade HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
                         + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(raw_body)).encode()
                         + b"\r\nConnection: close\r\n\r\n" + raw_body)
            answers.append((verb.decode(), "/v1/grade", int(reply.split(b" ", 2)[1] or 0), reply.decode("latin-1")))
    graded = [a for a in answers if a[2] < 300 or '"reward"' in a[3]]
    assert not graded, graded
    # the reads did reach the routes (refused there, not by the read bucket)
    assert sum(1 for a in answers if a[2] == 405) >= 30, [a[:3] for a in answers]


# ------------------------------------------------------------------ the in-flight cap


def test_the_in_flight_cap_prunes_stale_entries_only_when_they_decide(redis_server: RedisServer) -> None:
    settings = Settings(redis_url=redis_server.url, queue={"job_timeout": 5, "retries": 0})
    connection = redis_server.client()
    key = keys.in_flight("t")

    async def run() -> None:
        one, two = RedisJobs(settings, print), RedisJobs(settings, print)
        try:
            stale = time.time() - 60
            connection.zadd(key, {f"stale-{i}": stale for i in range(3)})
            connection.expire(key, 1000)
            await one.reserve("t", ["a", "b"], 3)  # 3 stale + 2 > 3: pruned, then 2 fit
            assert sorted(m.decode() for m in connection.zrange(key, 0, -1)) == ["a", "b"]
            with pytest.raises(ApiError):  # 2 fresh + 2 > 3, whole batch refused
                await one.reserve("t", ["c", "d"], 3)
            assert connection.zcard(key) == 2
            await one.reserve("t", ["c"], 3)  # exactly at the cap
            with pytest.raises(ApiError):
                await two.reserve("t", ["e"], 3)
            assert connection.zcard(key) == 3 and connection.ttl(key) > 0
            # below the cap a stale entry stays, and counts for nothing once the cap is reached
            connection.delete(key)
            connection.zadd(key, {"old": stale})
            await one.reserve("t", ["f"], 3)
            assert connection.zcard(key) == 2
            # racing replicas over stale entries: exactly the cap, never more
            connection.delete(key)
            connection.zadd(key, {f"stale-{i}": stale for i in range(5)})
            outcomes = await asyncio.gather(*((one, two)[i % 2].reserve("t", [f"race-{i}"], 5) for i in range(12)),
                                            return_exceptions=True)
            assert sum(1 for o in outcomes if o is None) == 5
            assert connection.zcard(key) == 5 and all(m.startswith(b"race-") for m in connection.zrange(key, 0, -1))
        finally:
            await one.close()
            await two.close()

    asyncio.run(run())


def test_the_in_flight_set_gets_its_ttl_when_made_and_again_when_made_anew(redis_server: RedisServer) -> None:
    """The TTL is set by the reservation that makes the set, not renewed by the next ones (a command
    a job), and a set that emptied and is made again gets one again: never a set without a TTL."""
    settings = Settings(redis_url=redis_server.url, queue={"job_timeout": 5, "retries": 0})
    connection = redis_server.client()
    key = keys.in_flight("t")

    async def run() -> None:
        jobs = RedisJobs(settings, print)
        try:
            await jobs.reserve("t", ["a"], 5)
            made = connection.ttl(key)
            assert made > 0
            connection.expire(key, 100)  # to tell a renewal apart
            await jobs.reserve("t", ["b", "c"], 5)
            assert 0 < connection.ttl(key) <= 100
            for job_id in ("a", "b", "c"):
                await jobs.release("t", job_id)
            assert not connection.exists(key)  # an empty set is gone
            await jobs.reserve("t", ["d"], 5)
            assert connection.ttl(key) > 100
        finally:
            await jobs.close()

    asyncio.run(run())


# ------------------------------------------------------------------ attempts


def test_attempts_count_one_two_three_across_requeues_with_a_ttl(redis_server: RedisServer) -> None:
    connection = redis_server.client()
    numbers = []
    for _ in range(3):  # each attempt a new holder, after the last one's lease lapsed
        lease = Lease(connection, "requeued", new_token("lane"), 200)
        numbers.append(lease.take(100))
        assert 0 < connection.ttl(keys.attempts("requeued")) <= 100
        time.sleep(0.3)
    assert numbers == [1, 2, 3]
    connection.set(keys.result("requeued"), RESULT)
    assert Lease(connection, "requeued", new_token("lane"), 200).take(100) == 0
    assert connection.get(keys.attempts("requeued")) == b"3"


def test_a_take_repeated_by_the_same_attempt_is_not_counted_again(redis_server: RedisServer) -> None:
    # grade_job repeats a take whose reply was lost to a Redis error (_reaching_redis); the same
    # attempt then holds the lease already, and is still attempt 1
    connection = redis_server.client()
    lease = Lease(connection, "repeated", new_token("lane"), 5000)
    assert [lease.take(100), lease.take(100)] == [1, 1]
    other = Lease(connection, "repeated", new_token("other"), 5000)
    assert other.take(100) == -1


# ------------------------------------------------------------------ RQ's failure path, the status page


def _lane(connection: Any, name: str, queue: Queue) -> GradingWorker:
    worker = GradingWorker([queue], connection=connection, serializer=JSONSerializer, name=name,
                           job_monitoring_interval=1)
    worker.heartbeat_grace = 1
    return worker


@pytest.mark.parametrize("how", ["raises", "times_out"])
def test_a_failed_job_leaves_no_execution_record_and_every_job_record_expires(redis_server: RedisServer,
                                                                              how: str) -> None:
    connection = redis_server.client()
    queue = Queue("impl", connection=connection, serializer=JSONSerializer)
    if how == "raises":
        queue.enqueue(raises, job_id="doomed", retry=Retry(max=1, enqueue_at_front=True), result_ttl=0,
                      failure_ttl=120)
    else:
        queue.enqueue(sleeps, 30, job_id="doomed", job_timeout=1, retry=Retry(max=1, enqueue_at_front=True),
                      result_ttl=0, failure_ttl=120)
    # in a fork: SIGALRM (the job's deadline) is also the test runner's own timeout
    report = report_from_fork(lambda: {"worked": _lane(redis_server.client(), "fails", Queue(
        "impl", connection=redis_server.client(), serializer=JSONSerializer)).work(burst=True, with_scheduler=False)})
    assert report["worked"]
    job = Job.fetch("doomed", connection=connection, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FAILED
    assert "doomed" in FailedJobRegistry("impl", connection=connection).get_job_ids()
    assert queue.started_job_registry.get_job_ids(cleanup=False) == []
    assert running_jobs(connection, ["impl"]) == {}
    assert not list(connection.scan_iter("rq:execution*"))
    assert not connection.exists("rq:worker:fails:executions")
    assert 0 < connection.ttl("rq:job:doomed") <= 120
    for key in connection.scan_iter("rq:results:*"):
        assert connection.ttl(key) > 0, key


def test_the_status_page_s_running_jobs_survive_what_redis_may_hold_and_write_nothing(
        redis_server: RedisServer) -> None:
    connection = redis_server.client()
    queue = Queue("impl", connection=connection, serializer=JSONSerializer)
    for job_id in ("gone", "queued-too", "old", "new", "elsewhere"):
        queue.enqueue(sleeps, 0, job_id=job_id)
    lane = _lane(connection, "lane", queue)
    other = _lane(connection, "other", queue)
    for job_id, worker in (("gone", lane), ("queued-too", lane), ("old", lane), ("new", lane), ("elsewhere", other)):
        job = Job.fetch(job_id, connection=connection, serializer=JSONSerializer)
        worker.prepare_execution(job)
        time.sleep(0.01)  # "new" starts after "old"
    connection.delete("rq:job:gone")  # finished between the registry's read and the job's
    connection.hset("rq:job:queued-too", "status", "queued")  # re-queued since
    connection.rpush(queue.key, "gone")  # the queue's list is the status page's to read only
    connection.config_resetstat()
    running = running_jobs(connection, ["impl"])
    calls = {name.removeprefix("cmdstat_") for name in connection.info("commandstats")}
    assert {name: job["id"] for name, job in running.items()} == {"lane": "new", "other": "elsewhere"}
    writes = calls - {"config|resetstat", "zrange", "hgetall", "hget", "hmget", "exists", "info"}
    assert not writes, writes
    assert b"gone" in connection.lrange(queue.key, 0, -1)

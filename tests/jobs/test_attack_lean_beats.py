"""Attacks on the lanes' lean beats (worker.grading_worker: a beat renews the job's lease and the
execution's StartedJobRegistry entry alone; RQ's other records of an execution are not written:
app.jobs.rq_bookkeeping), on real Redis with real worker processes and API servers:

* a lane SIGKILLed mid-job, with the service's own beat settings: the job is re-queued within
  interval + grace + maintenance interval and finished once by another lane, and no RQ record of
  the dead execution outlives the dead lane's own registration;
* the same with every other lane busy while the status page (or a metrics scrape) is open: RQ's
  registry count the page reads re-queues the abandoned job itself, without the lanes' deletion of
  the dead execution's records;
* Redis flushed while a lane runs a job: the worker's RQ record is lost, and whatever the lane
  writes to it afterwards must still expire."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest

from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, SLOW_RIGHT, collect, until
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers and sandboxes

# The service's own beat settings (app.settings QueueSettings defaults): a beat every 5 s.
DEFAULT_BEATS = {"SCALING_GRADER_QUEUE__HEARTBEAT_INTERVAL": "5", "SCALING_GRADER_QUEUE__HEARTBEAT_GRACE": "10",
                 "SCALING_GRADER_QUEUE__MAINTENANCE_INTERVAL": "5", "SCALING_GRADER_SANDBOX__WARM_POOL_SIZE": "1"}
REQUEUE_BOUND = 5 + 10 + 5  # interval + grace + maintenance interval


def _submit(client: httpx.Client, request_id: str) -> str:
    r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": SLOW_RIGHT, "wait": 0,
                                       "request_id": request_id})
    assert r.status_code == 202, r.text
    return str(r.json()["job_id"])


def _running_execution(redis_server: RedisServer, worker: str, job_id: str) -> str | None:
    """The composite key (job:execution) of the named worker's execution of the job, once its
    attempt has begun grading (took the lease)."""
    connection = redis_server.client()
    name, status = connection.hmget(f"rq:job:{job_id}", "worker_name", "status")
    if name != worker.encode() or status != b"started" or connection.get(f"sg:lease:{job_id}") is None:
        return None
    members = [m.decode() for m in connection.zrange("rq:wip:impl", 0, -1)]
    return next((m for m in members if m.startswith(f"{job_id}:")), None)


def _graded_total(redis_server: RedisServer) -> int:
    return sum(int(v) for v in redis_server.client().hvals("sg:grades:total"))


def _records_of(redis_server: RedisServer, dead: str, composite: str) -> dict[str, int]:
    """Every RQ key that names the dead lane or holds its dead execution (by name or as a member),
    with its remaining life in ms (-1: none)."""
    connection = redis_server.client()
    execution_id = composite.split(":", 1)[1]
    found: dict[str, int] = {}
    for raw in connection.scan_iter("rq:*"):
        key = raw.decode()
        kind = connection.type(raw)
        holds = execution_id in key or dead in key
        if kind == b"set":
            holds = holds or connection.sismember(raw, composite)
        elif kind == b"zset":
            holds = holds or any(execution_id in m.decode() for m in connection.zrange(raw, 0, -1))
        if holds:
            found[key] = int(connection.pttl(raw))
    return found


def _killed_mid_job(redis_server: RedisServer, client: httpx.Client, queue: dict[str, str], request_id: str
                    ) -> tuple[str, str, float]:
    """Start the lane ``victim``, give it a job, SIGKILL it (the worker and its lane) once grading
    began: the job id, the dead execution's composite key, and the monotonic time of the kill."""
    victim = start_worker(redis_server.url, "victim", queue)
    try:
        job_id = _submit(client, request_id)
        composite: list[str] = []

        def grading() -> bool:
            found = _running_execution(redis_server, "victim", job_id)
            if found:
                composite.append(found)
            return bool(found)

        until(grading, 120, "the victim to start grading")
        os.killpg(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        victim.wait()
    finally:
        stop_worker(victim)
    return job_id, composite[0], killed_at


def test_a_killed_lanes_job_is_requeued_in_time_run_once_and_its_dead_execution_leaves_nothing(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **DEFAULT_BEATS}
    connection = redis_server.client()
    heir: subprocess.Popen | None = None
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
            job_id, composite, killed_at = _killed_mid_job(redis_server, client, DEFAULT_BEATS, "lean-kill")
            heir = start_worker(redis_server.url, "heir", DEFAULT_BEATS)
            until(lambda: connection.sismember("rq:workers", "rq:worker:heir"), 120, "the heir to be up")
            heir_up = time.monotonic()
            until(lambda: connection.hmget(f"rq:job:{job_id}", "worker_name", "status") != [b"victim", b"started"],
                  REQUEUE_BOUND + 30, "the dead lane's job to be re-queued")
            requeued_at = time.monotonic()
            bodies = collect(client, [job_id], timeout=120)
            until(lambda: connection.hget("rq:worker:heir", "successful_job_count") == b"1", 60,
                  "the heir to run the re-queued job")
            left = _records_of(redis_server, "victim", composite)
            # the dead lane's own registration, the bound for anything of it still in Redis
            worker_life = left.get("rq:worker:victim", 0)
    finally:
        if heir is not None:
            stop_worker(heir)
    # dead for RQ interval + grace after its last beat; found by the heir's next maintenance pass
    bound = max(killed_at + 5 + 10, heir_up) + 5 + 2
    assert requeued_at <= bound, (requeued_at - killed_at, heir_up - killed_at)
    body = bodies[job_id]
    assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
    assert body["result"]["details"]["attempt"] == 2 and _graded_total(redis_server) == 1
    assert f"rq:execution:{composite}" not in left, left
    # nothing of the dead execution outlives the dead lane's own record (RQ's worker TTL): an
    # index that lasts the job's whole timeout (15 minutes) for every lane killed piles up
    outliving = {key: ttl for key, ttl in left.items() if ttl == -1 or ttl > worker_life + 1000}
    assert not outliving, (outliving, worker_life)


def test_a_status_page_open_while_the_lanes_are_busy_leaves_no_record_of_the_dead_execution(redis_server) -> None:
    # Every other lane is busy (here: none is up), so the lanes' maintenance does not run; an
    # operator's status page (it reloads itself) or a Prometheus scrape reads the queues' depths.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    connection = redis_server.client()
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        job_id, composite, _ = _killed_mid_job(redis_server, client, FAST_QUEUE, "lean-status")

        expires = connection.zscore("rq:wip:impl", composite)
        assert expires is not None
        while time.time() < expires + 3:  # the page reloads past the dead execution's expiry
            assert client.get("/v1/status").status_code == 200
            assert client.get("/metrics").status_code == 200
            time.sleep(0.5)
        heir = start_worker(redis_server.url, "heir", FAST_QUEUE)
        try:
            bodies = collect(client, [job_id], timeout=120)
            until(lambda: connection.hget("rq:worker:heir", "successful_job_count") == b"1", 60,
                  "the heir to run the re-queued job")
        finally:
            stop_worker(heir)
    body = bodies[job_id]
    assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
    assert _graded_total(redis_server) == 1
    # (when the lanes wrote RQ's execution hash, it lasted the job's whole timeout, and a re-queue
    # by RQ's own count left it behind for a quarter of an hour)
    left = {k.decode(): connection.ttl(k) for k in connection.scan_iter(f"rq:execution:{composite}")}
    assert not left, left


def test_a_lane_that_runs_on_through_a_redis_flush_leaves_no_record_without_a_ttl(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    connection = redis_server.client()
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        lane = start_worker(redis_server.url, "flushed", FAST_QUEUE)
        try:
            job_id = _submit(client, "lean-flush")
            until(lambda: _running_execution(redis_server, "flushed", job_id), 120, "the lane to start grading")
            connection.flushall()  # Redis lost everything (a restart without persistence, a failover)
            until(lambda: connection.hget("rq:worker:flushed", "successful_job_count") == b"1", 120,
                  "the lane to end its job")
            time.sleep(1.5)  # a beat or two after it
            assert lane.poll() is None
            # what the lane wrote to its RQ record after the loss must expire: a record without a TTL
            # stays forever if the lane is then killed, and a lane restarted under the same name is
            # refused by RQ ("There exists an active worker named ...")
            without_ttl = [k.decode() for k in connection.scan_iter("rq:*") if connection.ttl(k) == -1]
            assert "rq:worker:flushed" not in without_ttl, (without_ttl, connection.hgetall("rq:worker:flushed"))
        finally:
            stop_worker(lane)


def test_a_record_left_without_a_ttl_does_not_keep_a_lane_of_that_name_from_starting(redis_server) -> None:
    # what a lane killed after such a flush leaves: a few fields of its record, and no TTL
    connection = redis_server.client()
    connection.hset("rq:worker:orphaned", mapping={"successful_job_count": 1, "state": "idle"})
    lane = start_worker(redis_server.url, "orphaned", FAST_QUEUE)
    try:
        until(lambda: connection.hget("rq:worker:orphaned", "birth") is not None, 120, "the lane to register")
        assert lane.poll() is None
        assert connection.ttl("rq:worker:orphaned") > 0
    finally:
        stop_worker(lane)

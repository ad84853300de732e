"""Every job's result is written once and counted once, on real Redis with real worker
processes: a worker stopped (SIGSTOP) past its heartbeat, a worker cut off from Redis by a
partition (a loopback proxy the test pauses), and Redis itself killed and restarted. The worker
that looked dead comes back and neither overwrites, nor re-counts, nor re-queues the job another
worker took over; workers reconnect instead of exiting."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest

from app.jobs.worker_registry import running_jobs
from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, collect, completion, until
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.tcp_proxy import PausableProxy
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers and sandboxes

# Right, and slow: each case sleeps, so a job is still held when the test strikes.
SLOW_RIGHT = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math, time\n"
    "    time.sleep(2.0)\n"
    "    return math.ceil(peak_flops * bytes_per_weight / (2 * hbm_bandwidth) - 1e-9)\n"
)


def _submit(client: httpx.Client, request_id: str, text: str = SLOW_RIGHT) -> str:
    r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": text, "wait": 0,
                                       "request_id": request_id, "all_or_nothing": True})
    assert r.status_code == 202, r.text
    return str(r.json()["job_id"])



def _grading(redis_server: RedisServer, worker: str, job_id: str) -> bool:
    """The named worker runs the job and its attempt has begun grading (took the lease)."""
    client = redis_server.client()
    name, status = client.hmget(f"rq:job:{job_id}", "worker_name", "status")
    return name == worker.encode() and status == b"started" and client.get(f"sg:lease:{job_id}") is not None


def _done_with_a_job(redis_server: RedisServer, worker: str) -> bool:
    """The worker ended a job (RQ's count of its jobs, done or failed) and runs none now (the
    lanes do not write busy and idle: the StartedJobRegistry, as the status page reads it)."""
    connection = redis_server.client()
    done, failed = connection.hmget(f"rq:worker:{worker}", "successful_job_count", "failed_job_count")
    return int(done or 0) + int(failed or 0) >= 1 and worker not in running_jobs(connection)


def _entry_lapsed(redis_server: RedisServer, job_id: str) -> bool:
    """No execution of the job in the impl queue's StartedJobRegistry is ahead of the clock."""
    entries = redis_server.client().zrange("rq:wip:impl", 0, -1, withscores=True)
    return all(score <= time.time() for member, score in entries if member.decode().startswith(f"{job_id}:"))


def _graded_total(redis_server: RedisServer) -> int:
    """Grades the workers counted (the deployment's totals in Redis)."""
    return sum(int(v) for v in redis_server.client().hvals("sg:grades:total"))


def _finished(client: httpx.Client, job_id: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json()
        if body["status"] == "finished":
            return dict(body["result"])
    raise AssertionError(f"job {job_id} did not finish")


def _stored(redis_server: RedisServer, job_id: str) -> bytes | None:
    return redis_server.client().get(f"sg:result:{job_id}")


def test_a_worker_stopped_past_its_heartbeat_neither_overwrites_nor_recounts(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        victim = start_worker(redis_server.url, "stopped", FAST_QUEUE)
        survivor: subprocess.Popen | None = None
        try:
            job_id = _submit(client, "sigstop")
            until(lambda: _grading(redis_server, "stopped", job_id), 120, "the victim to start grading")
            os.killpg(victim.pid, signal.SIGSTOP)  # the whole group: the worker and its sandboxes
            survivor = start_worker(redis_server.url, "survivor", FAST_QUEUE)
            first = _finished(client, job_id)  # the survivor's re-run, read by the client
            stored = _stored(redis_server, job_id)
            assert first["details"]["attempt"] == 2 and first["reward"] == 1.0
            # (RQ drops a job's records once it succeeded: the survivor's own count says it ran it)
            # (written as the survivor's lane goes idle, a moment after the job's result)
            until(lambda: redis_server.client().hget("rq:worker:survivor", "successful_job_count") == b"1", 30,
                  "the survivor's count of jobs done")
            os.killpg(victim.pid, signal.SIGCONT)
            # The stopped attempt goes on (its cases may now time out) and ends without writing.
            until(lambda: _done_with_a_job(redis_server, "stopped"), 120, "the victim to finish its stale attempt")
            time.sleep(2)  # beats and a maintenance pass after it
            assert victim.poll() is None  # it carries on working
            assert _stored(redis_server, job_id) == stored  # not overwritten
            again = client.get(f"/v1/jobs/{job_id}", params={"wait": 0}).json()["result"]
            assert again == first
            assert _graded_total(redis_server) == 1  # counted once
            assert int(redis_server.client().get(f"sg:attempts:{job_id}")) == 2
            assert redis_server.client().llen("rq:queue:impl") == 0  # not queued a third time
        finally:
            if victim.poll() is None:
                os.killpg(victim.pid, signal.SIGCONT)
            stop_worker(victim)
            if survivor is not None:
                stop_worker(survivor)


def test_a_worker_cut_off_past_its_heartbeat_does_not_requeue_or_rewrite_and_reconnects(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    proxy = PausableProxy(redis_server.port)
    victim = start_worker(proxy.url, "cut-off", FAST_QUEUE)
    survivor: subprocess.Popen | None = None
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
            job_id = _submit(client, "partition")
            until(lambda: _grading(redis_server, "cut-off", job_id), 120, "the victim to start grading")
            proxy.pause()
            survivor = start_worker(redis_server.url, "survivor", FAST_QUEUE)
            first = _finished(client, job_id)
            stored = _stored(redis_server, job_id)
            assert first["details"]["attempt"] == 2 and first["reward"] == 1.0
            stop_worker(survivor)  # the next job can go only to the victim
            survivor = None
            proxy.resume()
            until(lambda: _done_with_a_job(redis_server, "cut-off"), 180, "the victim to reconnect and go idle")
            time.sleep(3)  # beats and maintenance passes after it
            assert victim.poll() is None  # reconnected, did not exit
            assert _stored(redis_server, job_id) == stored
            assert client.get(f"/v1/jobs/{job_id}", params={"wait": 0}).json()["result"] == first
            assert _graded_total(redis_server) == 1
            assert int(redis_server.client().get(f"sg:attempts:{job_id}")) == 2
            assert redis_server.client().llen("rq:queue:impl") == 0  # the victim re-queued nothing
            # and it grades again
            after = _finished(client, _submit(client, "after-partition"))
            assert after["reward"] == 1.0 and after["details"]["attempt"] == 1
    finally:
        stop_worker(victim)
        if survivor is not None:
            stop_worker(survivor)
        proxy.close()


def test_workers_ride_out_a_redis_kill_and_run_each_job_once(redis_server) -> None:
    # A grace longer than the outage: the jobs held across it are not presumed abandoned.
    queue = {**FAST_QUEUE, "SCALING_GRADER_QUEUE__HEARTBEAT_GRACE": "30"}
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **queue}
    names = ("outage-a", "outage-b")
    workers = [start_worker(redis_server.url, name, queue) for name in names]
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
            job_ids = [_submit(client, f"outage-{i}") for i in range(6)]
            until(lambda: sum(_grading(redis_server, n, j) for n in names for j in job_ids) == 2, 120,
                   "both workers to hold a job")
            assert redis_server.process is not None
            redis_server.process.kill()  # no clean shutdown; the AOF (fsync always) keeps every write
            redis_server.process.wait()
            redis_server.process = None
            time.sleep(8)
            redis_server.start()
            # (the API answers 503 while Redis loads its AOF: a client retries, as this one does)
            until(lambda: client.get("/readyz").status_code == 200, 30, "the API to reach Redis again")
            results = collect(client, job_ids, timeout=300)
        assert all(w.poll() is None for w in workers)  # reconnected, none exited
    finally:
        for worker in workers:
            stop_worker(worker)
    assert len(results) == len(job_ids)
    for body in results.values():
        assert body["status"] == "finished" and body["result"]["reward"] == 1.0
        assert body["result"]["details"]["attempt"] == 1  # none ran twice
    assert _graded_total(redis_server) == len(job_ids)
    assert redis_server.client().llen("rq:queue:impl") == 0


def test_a_dead_workers_job_is_rerun_before_the_jobs_queued_behind_it(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    # the order in which results are written (each write announces its job id on the results
    # channel; the survivor has one lane, so it is the order it ran them: RQ drops a job's
    # records, start time included, once it succeeded)
    announced = redis_server.client().pubsub(ignore_subscribe_messages=True)
    announced.subscribe("sg:results")
    with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
        victim = start_worker(redis_server.url, "killed", FAST_QUEUE)
        survivor: subprocess.Popen | None = None
        try:
            first = _submit(client, "front-0")
            until(lambda: _grading(redis_server, "killed", first), 120, "the victim to start grading")
            behind = [_submit(client, f"front-{i}") for i in range(1, 4)]  # queued behind the held job
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
            # The survivor starts once the victim's lease has lapsed (its execution's entry in the
            # StartedJobRegistry, which the lease is held by), so its first maintenance pass
            # finds the job dead while the others still wait (a survivor up sooner would take the
            # queue's head before anything is re-queued, whatever the re-queue's side).
            until(lambda: _entry_lapsed(redis_server, first), 60, "the victim's lease to lapse")
            survivor = start_worker(redis_server.url, "survivor", FAST_QUEUE)
            results = collect(client, [first, *behind], timeout=240)
        finally:
            stop_worker(victim)
            if survivor is not None:
                stop_worker(survivor)
    order: list[str] = []
    deadline = time.monotonic() + 10
    while len(order) < 4 and time.monotonic() < deadline:  # (None: a subscription's confirmation, or nothing yet)
        if (message := announced.get_message(timeout=1)) is not None:
            order.append(message["data"].split(b"\n", 1)[0].decode())
    announced.close()
    assert len(results) == 4 and all(b["result"]["reward"] == 1.0 for b in results.values())
    assert results[first]["result"]["details"]["attempt"] == 2
    # the re-run ran first: the re-queued job went to the front, not behind the backlog
    assert order == [first, *behind], order

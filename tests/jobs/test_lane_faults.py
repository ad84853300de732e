"""Faults aimed at the lanes themselves, on real Redis with real worker processes and sandboxes:
one lane process killed in the middle of its job (the rest of its worker alive), and two workers
handed the same job at once. Each job ends finished exactly once, with the right result, counted
once, and no job is lost."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from rq import Worker
from rq.serializers import JSONSerializer

from app.jobs.worker_registry import running_jobs
from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, SLOW_RIGHT, SLOW_WRONG, collect, until
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers and sandboxes



def _submit(client: httpx.Client, text: str, request_id: str) -> str:
    r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": text, "wait": 0,
                                       "request_id": request_id, "all_or_nothing": True})
    assert r.status_code == 202, r.text
    return str(r.json()["job_id"])



def _attempts(redis_server: RedisServer, job_id: str) -> int:
    return int(redis_server.client().get(f"sg:attempts:{job_id}") or 0)  # counted as grading begins


def _graded_total(redis_server: RedisServer) -> int:
    return sum(int(v) for v in redis_server.client().hvals("sg:grades:total"))


def _held_by(redis_server: RedisServer, job_id: str) -> str | None:
    name, status = redis_server.client().hmget(f"rq:job:{job_id}", "worker_name", "status")
    return name.decode() if status == b"started" and name else None


def test_a_lane_process_killed_mid_job_loses_no_job_and_runs_it_once_more(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        submitted = {_submit(client, SLOW_RIGHT if i % 2 else SLOW_WRONG, f"lane-fault-{i}"): bool(i % 2)
                     for i in range(4)}
        job_ids = list(submitted)
        victim = start_worker(redis_server.url, "struck", FAST_QUEUE, jobs=2)
        survivor = None
        try:
            # the second lane (a process of its own) grading a job: that lane alone is killed
            until(lambda: any(_held_by(redis_server, j) == "struck-2" and _attempts(redis_server, j)
                               for j in job_ids), 120, "the second lane to grade a job")
            (struck_job,) = [j for j in job_ids if _held_by(redis_server, j) == "struck-2"]
            lane = Worker.find_by_key("rq:worker:struck-2", connection=redis_server.client(),
                                      serializer=JSONSerializer)
            assert lane is not None and lane.pid not in (None, victim.pid)  # a lane is not the worker process
            begun = _attempts(redis_server, struck_job)
            os.kill(lane.pid, signal.SIGKILL)
            # the worker notices, stops its other lane after its job, and exits for its supervisor
            assert victim.wait(timeout=120) == 1
            survivor = start_worker(redis_server.url, "after-strike", FAST_QUEUE, jobs=2)
            results = collect(client, job_ids, timeout=240)
        finally:
            stop_worker(victim)
            if survivor is not None:
                stop_worker(survivor)
    assert set(results) == set(job_ids), "a job was lost"
    for job_id, body in results.items():
        assert body["status"] == "finished", body
        assert body["result"]["reward"] == (1.0 if submitted[job_id] else 0.0), body["result"]["explanation"]
    # the killed lane's job ran once more; it is finished once, counted once, like every other job
    assert results[struck_job]["result"]["details"]["attempt"] == begun + 1
    assert _graded_total(redis_server) == len(job_ids)
    assert redis_server.client().llen("rq:queue:impl") == 0


def test_two_workers_handed_the_same_job_grade_it_once(redis_server) -> None:
    # RQ can hold one job id twice (a retry racing the first request's enqueue, app.jobs.redis_jobs):
    # two idle workers then dequeue the same job at once. Only the lease's holder grades it; the
    # other waits for it and writes nothing.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        workers = [start_worker(redis_server.url, name, FAST_QUEUE) for name in ("racer-a", "racer-b")]
        try:
            connection = redis_server.client()
            until(lambda: all(connection.exists(f"sg:worker:{n}") for n in ("racer-a", "racer-b")), 120,
                   "both workers to start")
            job_id = _submit(client, SLOW_RIGHT, "raced")
            connection.rpush("rq:queue:impl", job_id)  # the same job, queued a second time
            results = collect(client, [job_id], timeout=180)
            until(lambda: connection.llen("rq:queue:impl") == 0 and not running_jobs(connection), 120,
                  "both workers to be done with it")
            time.sleep(2)  # beats and a maintenance pass after it
            counts = {n: int(connection.hget(f"rq:worker:{n}", "successful_job_count") or 0)
                      for n in ("racer-a", "racer-b")}
            stored = connection.get(f"sg:result:{job_id}")
        finally:
            for worker in workers:
                stop_worker(worker)
    assert results[job_id]["status"] == "finished" and results[job_id]["result"]["reward"] == 1.0
    assert counts == {"racer-a": 1, "racer-b": 1}  # both workers really ran the job function
    assert results[job_id]["result"]["details"]["attempt"] == 1
    assert _attempts(redis_server, job_id) == 1  # the second never began grading
    assert _graded_total(redis_server) == 1  # and counted nothing
    assert stored is not None and b'"attempt":1' in stored.replace(b" ", b"")

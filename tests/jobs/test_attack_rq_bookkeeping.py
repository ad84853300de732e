"""Attacks on the RQ bookkeeping the lanes no longer write (app/jobs/rq_bookkeeping.py): a lane
SIGKILLed at the two moments the leaner bookkeeping changed, on real Redis with real worker
processes and sandboxes. A proxy between the lane and Redis holds back the lane's command at the
chosen moment and kills the lane instead of passing it on:

* just before the attempt takes the job's lease (the job popped from its queue, its started
  record and its StartedJobRegistry entry written, in one round trip now);
* just after the result was written and counted, instead of RQ's success bookkeeping (the job is
  still ``started`` for RQ, and RQ keeps no copy of its result).

Either way RQ's own abandoned-job handling re-queues the job, another worker takes it, and the job
ends finished once: never lost, graded once (one attempt began grading, the grade counted once,
a written result never rewritten), with no RQ record of it left behind."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable

import httpx
import pytest
from rq import Worker
from rq.serializers import JSONSerializer

from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, RIGHT, collect, until
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.tcp_proxy import PausableProxy
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers and sandboxes

NAME = "struck-bookkeeping"


class KillAtCommandProxy(PausableProxy):
    """Relays as usual until a client sends a command containing ``marker``: that command is not
    passed on; ``strike`` runs instead (it kills the sender) and the connection is closed."""

    def __init__(self, target_port: int, marker: bytes, strike: Callable[[], None]) -> None:
        super().__init__(target_port)
        self.marker = marker
        self.strike = strike
        self.struck = threading.Event()

    def _forward(self, data: bytes, from_client: bool, to: socket.socket, state: dict) -> bool:
        if from_client and self.marker in data and not self.struck.is_set():
            self.strike()
            self.struck.set()
            return False
        return super()._forward(data, from_client, to, state)


def _graded_total(redis_server: RedisServer) -> int:
    return sum(int(v) for v in redis_server.client().hvals("sg:grades:total"))


def _rq_keys_of(redis_server: RedisServer, job_id: str) -> list[str]:
    connection = redis_server.client()
    named = [k.decode() for k in connection.scan_iter(f"rq:*{job_id}*")]
    registries = [*connection.scan_iter("rq:wip:*"), *connection.scan_iter("rq:finished:*")]
    registered = [key.decode() for key in registries if connection.zcard(key)]
    return named + registered


@pytest.mark.parametrize("moment", ["before_the_lease", "after_the_result"])
def test_a_lane_killed_where_rq_bookkeeping_was_cut_loses_no_job_and_grades_it_once(redis_server, moment) -> None:
    # after the result: the job's end (its execution's entry leaves the StartedJobRegistry)
    marker = b"sg:lease:" if moment == "before_the_lease" else b"ZREM\r\n$11\r\nrq:wip:impl"
    connection = redis_server.client()

    def strike() -> None:
        lane = Worker.find_by_key(f"rq:worker:{NAME}", connection=redis_server.client(), serializer=JSONSerializer)
        assert lane is not None and lane.pid
        os.kill(lane.pid, signal.SIGKILL)

    proxy = KillAtCommandProxy(redis_server.port, marker, strike)
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    victim = heir = None
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
            victim = start_worker(proxy.url, NAME, FAST_QUEUE)
            r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 0,
                                               "request_id": f"struck-{moment}"})
            assert r.status_code in (200, 202), r.text
            job_id = str(r.json().get("job_id") or r.json()["result"]["job_id"])
            until(proxy.struck.is_set, 120, f"the lane to reach the moment {moment}")
            assert victim.wait(timeout=120) == 1  # its lane died: the worker exits for its supervisor
            # what the kill left: a job RQ holds as started (popped from its queue, not finished)
            assert connection.hget(f"rq:job:{job_id}", "status") == b"started"
            assert connection.llen("rq:queue:impl") == 0
            written = connection.get(f"sg:result:{job_id}")
            assert (written is not None) == (moment == "after_the_result")
            heir = start_worker(redis_server.url, "heir", FAST_QUEUE)
            bodies = collect(client, [job_id], timeout=180)
            # RQ re-queued the job and the heir ran it (after the result: an attempt that grades nothing)
            until(lambda: connection.hget("rq:worker:heir", "successful_job_count") == b"1", 60,
                  "the heir to run the re-queued job")
            after = connection.get(f"sg:result:{job_id}")
    finally:
        for process in (victim, heir):
            if process is not None:
                stop_worker(process)
        proxy.close()
    body = bodies[job_id]
    assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
    assert body["result"]["details"]["attempt"] == 1  # one attempt began grading
    assert int(connection.get(f"sg:attempts:{job_id}") or 0) == 1
    assert _graded_total(redis_server) == 1  # counted once
    if written is not None:
        assert after == written  # the result written before the kill was never rewritten
    assert _rq_keys_of(redis_server, job_id) == []  # no RQ record of it left: not in any registry either

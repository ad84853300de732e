"""A worker process running several jobs at once (lanes, worker/lanes.py), on real Redis with real
worker processes and sandboxes: jobs really overlap (shown by RQ's own records of the jobs while they run), a
killed worker's jobs are all re-run elsewhere with the right result, a warm stop finishes the
jobs in hand and takes no more, the backstop deadline fires in a lane without disturbing the
others, and the automatic lane count follows the CPUs the process is given."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from rq import Worker
from rq.job import Job
from rq.serializers import JSONSerializer

from app.cpus import available_cpus
from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, RIGHT, SLOW_RIGHT, SLOW_WRONG, collect, completion
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers and sandboxes

# Right, and each case holds its lane for five seconds: still running when a stop comes.
HOLDS_RIGHT = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math, time\n"
    "    time.sleep(5.0)\n"
    "    return math.ceil(peak_flops * bytes_per_weight / (2 * hbm_bandwidth) - 1e-9)\n"
)
# Never returns: each case runs until the sandbox's wall limit ends it.
HANGS = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import time\n"
    "    time.sleep(600)\n"
)


def _submit(client: httpx.Client, text: str, request_id: str) -> str:
    r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": text, "wait": 0,
                                       "request_id": request_id, "all_or_nothing": True})
    assert r.status_code == 202, r.text
    return str(r.json()["job_id"])


def _holders(redis_server: RedisServer, job_ids: list[str]) -> dict[str, str]:
    """Job id -> the worker (lane) name RQ records as running it now."""
    client = redis_server.client()
    held = {}
    for job_id in job_ids:
        name, status = client.hmget(f"rq:job:{job_id}", "worker_name", "status")
        if status == b"started" and name:
            held[job_id] = name.decode()
    return held


def _wait_for_holders(redis_server: RedisServer, job_ids: list[str], count: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = _holders(redis_server, job_ids)
        if len(held) >= count:
            return held
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} jobs were ever running at once: {_holders(redis_server, job_ids)}")


def _wait_for_presence(redis_server: RedisServer, names: list[str], timeout: float = 120) -> None:
    """Until every named lane has started (probed its sandbox, warmed its pool) and beaten once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(redis_server.client().exists(f"sg:worker:{name}") for name in names):
            return
        time.sleep(0.1)
    raise AssertionError(f"lanes {names} never all started")


def _rq_job(redis_server: RedisServer, job_id: str) -> Job:
    return Job.fetch(job_id, connection=redis_server.client(), serializer=JSONSerializer)


def _succeeded(redis_server: RedisServer, lane: str) -> int:
    """The jobs a lane finished, as RQ counts them (kept a minute after the lane stopped)."""
    return int(redis_server.client().hget(f"rq:worker:{lane}", "successful_job_count") or 0)


class _RunningSampler:
    """Which of the jobs RQ records as running, and in which lane, read every 20 ms in one
    transaction (a consistent snapshot): the most running at one time, and the lanes running them
    then. (RQ's record of a job is dropped once it succeeded, app/jobs/rq_bookkeeping.py, so the
    overlap is watched while the jobs run rather than read from their records afterwards.)"""

    def __init__(self, redis_server: RedisServer, job_ids: list[str]) -> None:
        self.connection = redis_server.client()
        self.job_ids = job_ids
        self.peak = 0
        self.peak_lanes: set[str] = set()
        self.lanes_seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.connection.pipeline(transaction=True) as pipe:
                for job_id in self.job_ids:
                    pipe.hmget(f"rq:job:{job_id}", "status", "worker_name")
                rows = pipe.execute()
            running = [bytes(name).decode() for status, name in rows if status == b"started" and name]
            self.lanes_seen |= set(running)
            if len(running) > self.peak:
                self.peak, self.peak_lanes = len(running), set(running)
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_worker_runs_as_many_jobs_at_once_as_it_has_lanes(redis_server, lanes) -> None:
    # The one-lane worker is the control: the same jobs, never two at once.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        job_ids = [_submit(client, SLOW_RIGHT, f"overlap-{i}") for i in range(4)]
        sampler = _RunningSampler(redis_server, job_ids)
        worker = start_worker(redis_server.url, "lanes", FAST_QUEUE, jobs=lanes)
        try:
            results = collect(client, job_ids, timeout=240)
            registered = {w.name for w in Worker.all(connection=redis_server.client(), serializer=JSONSerializer)}
        finally:
            sampler.stop()
            stop_worker(worker)
    assert len(results) == len(job_ids)
    assert all(b["status"] == "finished" and b["result"]["reward"] == 1.0 for b in results.values()), results
    names = {"lanes"} | {f"lanes-{i}" for i in range(2, lanes + 1)}
    assert registered == names  # each lane is a registered RQ worker of its own
    assert sampler.lanes_seen <= names
    assert sampler.peak == lanes  # the most jobs RQ held as running at one time
    if lanes > 1:  # and the jobs that overlapped ran in different lanes of the one process
        assert len(sampler.peak_lanes) == lanes


def _attempts(redis_server: RedisServer, job_id: str) -> int:
    return int(redis_server.client().get(f"sg:attempts:{job_id}") or 0)  # counted as grading begins


def test_killing_a_worker_reruns_every_job_its_lanes_held(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        submitted = {}
        for i in range(6):
            right = i % 3 != 0
            submitted[_submit(client, SLOW_RIGHT if right else SLOW_WRONG, f"lane-kill-{i}")] = right
        job_ids = list(submitted)
        victim = start_worker(redis_server.url, "victim", FAST_QUEUE, jobs=2)
        survivor = None
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # kill while both lanes are grading a job
                held = _holders(redis_server, job_ids)
                if len(held) == 2 and all(_attempts(redis_server, job_id) for job_id in held):
                    break
                time.sleep(0.02)
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
            # What RQ recorded at the kill, how many attempts each held job had begun, and the jobs
            # the victim had finished before
            held = _holders(redis_server, job_ids)
            begun = {job_id: _attempts(redis_server, job_id) for job_id in held}
            done_before = {job_id for job_id in job_ids if redis_server.client().exists(f"sg:result:{job_id}")}
            assert set(held.values()) == {"victim", "victim-2"}, held  # both lanes held a job
            survivor = start_worker(redis_server.url, "survivor", FAST_QUEUE, jobs=2)
            collect(client, job_ids, timeout=240)
            deadline = time.monotonic() + 60  # until RQ has closed every job (a result may precede it;
            while time.monotonic() < deadline and any(  # a job's record is dropped once it succeeded)
                    redis_server.client().exists(f"rq:job:{job_id}") for job_id in job_ids):
                time.sleep(0.2)
            results = collect(client, job_ids, timeout=10)
        finally:
            stop_worker(victim)
            if survivor is not None:
                stop_worker(survivor)
        # (read once the survivor stopped: a lane writes its count of jobs done as it goes idle or stops)
        by_survivor = _succeeded(redis_server, "survivor") + _succeeded(redis_server, "survivor-2")
    assert len(results) == len(submitted), "a job was lost"
    for job_id, body in results.items():
        assert body["status"] == "finished", body
        assert body["result"]["reward"] == (1.0 if submitted[job_id] else 0.0), body["result"]["explanation"]
        # a job a victim lane held ran once more, on the survivor; no other job ran twice
        assert body["result"]["details"]["attempt"] == begun.get(job_id, 0) + 1, (job_id, held)
    assert not done_before & set(held)
    assert by_survivor == len(job_ids) - len(done_before)  # every job not finished before the kill, on the survivor


def test_a_warm_stop_finishes_the_jobs_in_hand_and_takes_no_more(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        job_ids = [_submit(client, SLOW_RIGHT, f"warm-{i}") for i in range(3)]
        worker = start_worker(redis_server.url, "warm", FAST_QUEUE, jobs=2)
        try:
            held = _wait_for_holders(redis_server, job_ids, 2)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=120) == 0
        finally:
            stop_worker(worker)
        results = collect(client, list(held), timeout=10)
        connection = redis_server.client()
        assert Worker.all(connection=connection, serializer=JSONSerializer) == []  # both lanes deregistered
        assert client.get("/readyz").json()["workers"] == []  # and their presence withdrawn
    assert set(results) == set(held)
    for body in results.values():
        assert body["status"] == "finished" and body["result"]["reward"] == 1.0
        assert body["result"]["details"]["attempt"] == 1  # finished by the stopping worker, not re-run
    assert sorted(held.values()) == ["warm", "warm-2"]
    assert [_succeeded(redis_server, lane) for lane in ("warm", "warm-2")] == [1, 1]  # each lane its own job
    (waiting,) = set(job_ids) - set(held)
    assert _rq_job(redis_server, waiting).get_status() == "queued"  # not started after the stop
    assert connection.lrange("rq:queue:impl", 0, -1) == [waiting.encode()]


def test_a_cold_stop_leaves_the_jobs_to_another_worker_and_writes_no_result(redis_server) -> None:
    # The second signal ends the process with cases in flight: a lane must not finish its job with
    # cut-short cases (a wrong, sandbox_error result); the jobs are re-run elsewhere instead.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        job_ids = [_submit(client, HOLDS_RIGHT, f"cold-{i}") for i in range(2)]
        worker = start_worker(redis_server.url, "cold", FAST_QUEUE, jobs=2)
        survivor = None
        try:
            held = _wait_for_holders(redis_server, job_ids, 2)
            deadline = time.monotonic() + 120  # and both attempts have begun grading (took the lease)
            while time.monotonic() < deadline and not all(_attempts(redis_server, job_id) for job_id in held):
                time.sleep(0.05)
            worker.send_signal(signal.SIGTERM)
            time.sleep(1.5)  # a second signal within a second is taken as the same request
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 1
            connection = redis_server.client()
            assert [connection.get(f"sg:result:{job_id}") for job_id in held] == [None, None]
            assert Worker.all(connection=connection, serializer=JSONSerializer) == []  # lanes deregistered
            survivor = start_worker(redis_server.url, "after-cold", FAST_QUEUE, jobs=2)
            results = collect(client, job_ids, timeout=180)
        finally:
            stop_worker(worker)
            if survivor is not None:
                stop_worker(survivor)
    assert set(results) == set(job_ids)
    for body in results.values():
        assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
        assert body["result"]["details"]["attempt"] == 2  # begun by the stopped worker, finished by the next


def test_the_backstop_deadline_fires_in_a_lane_and_spares_the_other(redis_server) -> None:
    # (a lane loads the bank on its first job: the right job is given 10 s for that on a loaded
    # machine; the hung one would run into its wall limit well after)
    deadline = {"SCALING_GRADER_QUEUE__JOB_TIMEOUT": "10", "SCALING_GRADER_QUEUE__RETRIES": "0",
                "SCALING_GRADER_SANDBOX__WALL_SECONDS": "40"}
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE, **deadline}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        worker = start_worker(redis_server.url, "deadline", {**FAST_QUEUE, **deadline}, jobs=2)
        try:
            _wait_for_presence(redis_server, ["deadline", "deadline-2"])  # each lane's sandbox is warm
            hung = _submit(client, HANGS, "deadline-hung")
            _wait_for_holders(redis_server, [hung], 1)
            right = _submit(client, RIGHT, "deadline-right")  # taken by the other lane meanwhile
            results = collect(client, [hung, right], timeout=120)
            alive = worker.poll() is None
        finally:
            stop_worker(worker)
    assert alive  # the deadline ended a job, not the worker
    assert results[right]["status"] == "finished" and results[right]["result"]["reward"] == 1.0, results[right]
    # Without the deadline the hung job would finish as a timeout verdict after the wall limit.
    assert results[hung]["status"] == "failed" and results[hung]["result"]["reward"] == 0.0
    result = _rq_job(redis_server, hung).latest_result()
    assert result is not None and "GradingDeadline" in (result.exc_string or "")
    # the right job ran in the other lane (a job's record is dropped once it succeeded: RQ's count)
    (other,) = {"deadline", "deadline-2"} - {_rq_job(redis_server, hung).worker_name}
    assert _succeeded(redis_server, other) == 1


def _lane_count(redis_server: RedisServer, name: str, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lanes = [w for w in Worker.all(connection=redis_server.client(), serializer=JSONSerializer)
                 if w.name == name or w.name.startswith(name + "-")]
        if lanes and redis_server.client().get(f"sg:worker:{name}"):  # started and published its presence
            time.sleep(1)  # all lanes register before the first publishes; settle anyway
            return len([w for w in Worker.all(connection=redis_server.client(), serializer=JSONSerializer)
                        if w.name == name or w.name.startswith(name + "-")])
        time.sleep(0.1)
    raise AssertionError(f"worker {name} never registered")


def test_auto_lanes_follow_the_cpus_the_worker_is_given_and_idle_lanes_stop(redis_server) -> None:
    one_cpu = min(os.sched_getaffinity(0))
    pinned = start_worker(redis_server.url, "pinned", FAST_QUEUE, queues="judge", jobs=0,
                          preexec_fn=lambda: os.sched_setaffinity(0, {one_cpu}))
    free = start_worker(redis_server.url, "free", FAST_QUEUE, queues="judge", jobs=None)  # the setting's default
    try:
        assert _lane_count(redis_server, "pinned") == 1
        assert _lane_count(redis_server, "free") == available_cpus()
        # Idle lanes wait in BLMOVE (worker.dequeue), which no signal interrupts off the main thread: they must
        # still see the stop and end cleanly (exit status 0, not the SIGKILL of a stuck worker).
        for worker in (pinned, free):
            worker.send_signal(signal.SIGTERM)
        assert pinned.wait(timeout=60) == 0 and free.wait(timeout=60) == 0
        assert Worker.all(connection=redis_server.client(), serializer=JSONSerializer) == []
    finally:
        stop_worker(pinned)
        stop_worker(free)


def test_a_lane_that_cannot_start_stops_the_whole_worker(redis_server) -> None:
    # A second worker under a live worker's name: its first lane is refused by RQ. Running on with
    # the other lane would hide it; the process stops (non-zero) and leaves nothing registered.
    first = start_worker(redis_server.url, "dup", FAST_QUEUE, queues="judge", jobs=1)
    second = None
    try:
        assert _lane_count(redis_server, "dup") == 1
        second = start_worker(redis_server.url, "dup", FAST_QUEUE, queues="judge", jobs=2)
        assert second.wait(timeout=60) == 1
        names = {w.name for w in Worker.all(connection=redis_server.client(), serializer=JSONSerializer)}
        assert names == {"dup"} and first.poll() is None
    finally:
        stop_worker(first)
        if second is not None:
            stop_worker(second)

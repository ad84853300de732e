"""Attacks on the moment between a lane's pop of a job and the job's start (worker/dequeue.py), on
a real Redis: a lane of two queues that Redis answers while the network to it is cut (a loopback
proxy the test pauses, with real worker processes and a real API server), a lane that dies
between its pop and its start, and the maintenance that puts such a job back, raced and repeated.
Before every lane's pop was a move into RQ's intermediate list, a lane of two queues popped with
BLPOP: the job answered into the cut was in no list at all and never ran."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
import redis
from rq import Queue, Retry
from rq.exceptions import DequeueTimeout
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

from app.jobs import keys
from tests.jobs.test_rq_contract import _calls_since_reset
from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, RIGHT, until
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.tcp_proxy import CountingProxy, PausableProxy
from tests.support.workers import start_worker, stop_worker
from worker.dequeue import STRANDED_AFTER_SECONDS, LaneQueue, intermediate_key, requeue_stranded, sightings_key
from worker.grading_worker import GradingWorker

pytestmark = pytest.mark.slow  # a Redis server per test

QUEUES = ("impl", "judge")


def noop() -> str:
    """A job (importable by name, as RQ needs)."""
    return "done"


def _queued(connection: Any, queue: str, job_id: str, **options: Any) -> Job:
    # with a retry, as the service queues its jobs (app.jobs.redis_jobs): putting a job back spends none
    return Queue(queue, connection=connection, serializer=JSONSerializer).enqueue(
        noop, job_id=job_id, retry=Retry(max=1, enqueue_at_front=True), **options)


def _lane_queues(connection: Any) -> tuple[type[LaneQueue], list[LaneQueue]]:
    cls = LaneQueue.of_one_lane()
    return cls, [cls(name, connection=connection, serializer=JSONSerializer) for name in QUEUES]


def _take(cls: type[LaneQueue], queues: list[LaneQueue], connection: Any, timeout: int | None = 1) -> Job | None:
    taken = cls.dequeue_any(queues, timeout, connection=connection, job_class=Job, serializer=JSONSerializer)
    return None if taken is None else taken[0]


def _lane(connection: Any, cls: type[LaneQueue], queues: list[LaneQueue], name: str) -> GradingWorker:
    """A lane's worker of these queues, registered and idle, as RQ's loop leaves it before a take."""
    lane = GradingWorker(queues, connection=connection, serializer=JSONSerializer, name=name, queue_class=cls)
    lane.register_birth()
    lane.set_state(WorkerStatus.IDLE)
    return lane


def _age_sighting(connection: Any, queue: str, job_id: str, seconds: float) -> None:
    """Put a maintenance pass's first sight of a stranded id ``seconds`` back (in Redis's time, as
    the pass records it)."""
    key = sightings_key(f"rq:queue:{queue}")
    sighting = connection.hget(key, job_id)
    assert sighting is not None
    _, _, queued_at = sighting.decode().partition(" ")  # (and the job's enqueued_at, kept)
    connection.hset(key, job_id, f"{connection.time()[0] - seconds} {queued_at}")


# ------------------------------------------------------------------ the take


def test_every_take_moves_the_id_into_its_queue_s_intermediate_list_until_the_start(redis_server) -> None:
    connection = redis_server.client()
    _queued(connection, "judge", "j-1")
    _queued(connection, "impl", "i-1")
    cls, queues = _lane_queues(connection)
    first = _take(cls, queues, connection)
    assert first is not None and first.id == "i-1"  # the queues' order is the priority, as RQ's
    # from the pop on, the id is in a list: never in none
    assert connection.lrange(intermediate_key("rq:queue:impl"), 0, -1) == [b"i-1"]
    second = _take(cls, queues, connection)
    assert second is not None and second.id == "j-1"
    assert connection.lrange(intermediate_key("rq:queue:judge"), 0, -1) == [b"j-1"]
    # the start takes it off, in the same round trip as the execution's entry
    lane = _lane(connection, cls, queues, "starts")
    connection.config_resetstat()
    execution = lane.prepare_execution(first)
    assert _calls_since_reset(connection) == {"zadd": 1, "hset": 1, "lrem": 1}
    assert connection.llen(intermediate_key("rq:queue:impl")) == 0
    assert execution.composite_key.encode() in connection.zrange("rq:wip:impl", 0, -1)


def test_an_idle_lane_waits_where_it_last_took_a_job_and_looks_in_the_others_after_each_wait(
        redis_server) -> None:
    connection = redis_server.client()
    cls, queues = _lane_queues(connection)
    connection.config_resetstat()
    with pytest.raises(DequeueTimeout):
        _take(cls, queues, connection)  # a look in each (it has just started), then a wait on the first
    assert _calls_since_reset(connection) == {"lmove": 2, "blmove": 1}
    # a job queued where the lane did not wait: its look after the empty wait takes it
    _queued(connection, "judge", "j-2")
    connection.config_resetstat()
    taken = _take(cls, queues, connection)
    assert taken is not None and taken.id == "j-2"
    assert _calls_since_reset(connection) == {"lmove": 1, "hgetall": 1}  # the move, and the job's record (as RQ's)
    # it now waits on judge: impl looked at first (the priority), the wait covers judge
    connection.config_resetstat()
    with pytest.raises(DequeueTimeout):
        _take(cls, queues, connection)
    assert _calls_since_reset(connection) == {"lmove": 1, "blmove": 1}
    # idle: a wait and a look in the other queue, two commands a wait (RQ's BLPOP was one)
    connection.config_resetstat()
    for _ in range(3):
        with pytest.raises(DequeueTimeout):
            _take(cls, queues, connection)
    assert _calls_since_reset(connection) == {"lmove": 3, "blmove": 3}
    _queued(connection, "impl", "i-2")
    taken = _take(cls, queues, connection)
    assert taken is not None and taken.id == "i-2"


def test_a_lane_of_one_queue_costs_one_command_a_wait_as_rq_s_own(redis_server) -> None:
    connection = redis_server.client()
    cls = LaneQueue.of_one_lane()
    queues = [cls("impl", connection=connection, serializer=JSONSerializer)]
    connection.config_resetstat()
    for _ in range(3):
        with pytest.raises(DequeueTimeout):
            _take(cls, queues, connection)
    assert _calls_since_reset(connection) == {"blmove": 3}
    _queued(connection, "impl", "i-one")
    connection.config_resetstat()
    taken = _take(cls, queues, connection)
    assert taken is not None and taken.id == "i-one" and _calls_since_reset(connection) == {"blmove": 1, "hgetall": 1}


def test_each_lane_waits_by_its_own_record_and_an_idle_one_takes_what_a_busy_one_cannot(redis_server) -> None:
    """Two lanes of the same worker: one takes a judge job (and would wait on judge next); the
    other, fresh, still waits on the first queue, so an impl job queued while the first is busy
    is taken by the idle one within its wait, not after it."""
    connection = redis_server.client()
    busy_cls, busy_queues = _lane_queues(connection)
    _queued(connection, "judge", "j-busy")
    taken = _take(busy_cls, busy_queues, connection)
    assert taken is not None and taken.id == "j-busy"
    idle_connection = redis_server.client()
    idle_cls, idle_queues = _lane_queues(idle_connection)
    outcome: list[object] = []
    waiting = threading.Thread(target=lambda: outcome.append(_catch(idle_cls, idle_queues, idle_connection, 30)))
    waiting.start()
    until(lambda: any(c["cmd"] == "blmove" and "b" in c["flags"] for c in connection.client_list()), 10,
          "the idle lane to wait")
    _queued(connection, "impl", "i-idle")
    waiting.join()
    # waited on impl: took it (a wait on judge would have ended empty, 30 s on, with the job still queued)
    assert [getattr(o, "id", o) for o in outcome] == ["i-idle"]


def _catch(cls: type[LaneQueue], queues: list[LaneQueue], connection: Any, timeout: int) -> object:
    try:
        return _take(cls, queues, connection, timeout)
    except DequeueTimeout as timed_out:
        return timed_out


def test_a_job_deleted_while_it_waited_is_skipped_and_not_left_behind(redis_server) -> None:
    connection = redis_server.client()
    gone = _queued(connection, "impl", "gone")
    _queued(connection, "impl", "kept")
    connection.delete(gone.key)
    cls, queues = _lane_queues(connection)
    taken = _take(cls, queues, connection)
    assert taken is not None and taken.id == "kept"
    assert connection.lrange(intermediate_key("rq:queue:impl"), 0, -1) == [b"kept"]


def test_a_take_without_a_timeout_looks_in_every_queue_and_returns_nothing(redis_server) -> None:
    connection = redis_server.client()
    cls, queues = _lane_queues(connection)
    assert _take(cls, queues, connection, timeout=None) is None  # RQ's burst mode: no wait
    _queued(connection, "judge", "j-4")
    taken = _take(cls, queues, connection, timeout=None)
    assert taken is not None and taken.id == "j-4"


# ------------------------------------------------------------------ the maintenance


def _stranded(connection: Any, job_id: str, behind: int = 2) -> Queue:
    """A job a lane took (moved into the intermediate list) and never started, with ``behind``
    jobs queued after it."""
    queue = Queue("impl", connection=connection, serializer=JSONSerializer)
    _queued(connection, "impl", job_id)
    cls, queues = _lane_queues(connection)
    taken = _take(cls, queues, connection)
    assert taken is not None and taken.id == job_id
    for i in range(behind):
        _queued(connection, "impl", f"{job_id}-behind-{i}")
    return queue


def test_a_job_taken_and_never_started_goes_back_to_the_front_at_the_second_look(redis_server) -> None:
    connection = redis_server.client()
    queue = _stranded(connection, "stranded")
    assert requeue_stranded(queue) == 0  # first look: noted
    assert requeue_stranded(queue) == 0  # a look soon after: a lane may be between pop and start
    assert connection.lrange(intermediate_key(queue.key), 0, -1) == [b"stranded"]
    _age_sighting(connection, "impl", "stranded", STRANDED_AFTER_SECONDS + 1)
    assert requeue_stranded(queue) == 1
    assert queue.get_job_ids()[0] == "stranded"  # at the front, ahead of the jobs queued since
    assert connection.llen(intermediate_key(queue.key)) == 0
    assert not connection.exists(sightings_key(queue.key))  # nothing seen is left behind
    job = Job.fetch("stranded", connection=connection, serializer=JSONSerializer)
    assert job.get_status() == "queued" and job.retries_left == 1  # as it was: no retry spent, not failed
    assert requeue_stranded(queue) == 0 and queue.get_job_ids().count("stranded") == 1



def test_the_minute_s_pass_between_rq_s_whole_passes_is_the_look_for_stranded_jobs_alone(redis_server) -> None:
    # a job a lane took and never started goes back at the minute's passes, while RQ's whole pass
    # of its registries (about 20 commands) waits for its own turn, once every five minutes
    connection = redis_server.client()
    queue = _stranded(connection, "stranded", behind=0)
    cls, queues = _lane_queues(connection)
    lane = _lane(connection, cls, queues, "minute")
    connection.set(keys.REGISTRY_MAINTENANCE, "another lane", ex=300)  # RQ's whole pass ran a moment ago
    connection.config_resetstat()
    lane.run_maintenance_tasks()
    calls = _calls_since_reset(connection)
    assert connection.get(keys.MINUTE_MAINTENANCE) == b"minute"
    assert "smembers" not in calls and "zremrangebyscore" not in calls, calls  # none of RQ's whole pass
    assert calls.get("llen") == len(QUEUES), calls  # each queue's intermediate list looked at
    assert connection.hexists(sightings_key(queue.key), "stranded")  # first sight, noted
    _age_sighting(connection, "impl", "stranded", STRANDED_AFTER_SECONDS + 1)
    connection.delete(keys.MINUTE_MAINTENANCE)  # the next minute
    lane._minute_pass_asked_at = float("-inf")
    lane.run_maintenance_tasks()
    assert queue.get_job_ids() == ["stranded"] and not connection.llen(queue.intermediate_queue_key)
    assert connection.get(keys.REGISTRY_MAINTENANCE) == b"another lane"  # not RQ's whole pass yet
    connection.delete(keys.MINUTE_MAINTENANCE, keys.REGISTRY_MAINTENANCE)  # five minutes on
    lane._minute_pass_asked_at = float("-inf")
    connection.config_resetstat()
    lane.run_maintenance_tasks()
    assert "smembers" in _calls_since_reset(connection)  # RQ's whole pass, its turn
    assert connection.get(keys.REGISTRY_MAINTENANCE) == b"minute"

def test_a_started_job_left_in_the_list_is_only_taken_off_it(redis_server) -> None:
    # a start whose round trip was cut after the execution's entry: the job runs, it is not queued again
    connection = redis_server.client()
    queue = _stranded(connection, "running", behind=0)
    job = Job.fetch("running", connection=connection, serializer=JSONSerializer)
    lane = GradingWorker([queue], connection=connection, serializer=JSONSerializer, name="runs")
    lane.prepare_execution(job)
    connection.rpush(intermediate_key(queue.key), "running")  # what the cut left
    requeue_stranded(queue)
    _age_sighting(connection, "impl", "running", STRANDED_AFTER_SECONDS + 1)
    assert requeue_stranded(queue) == 0
    assert connection.llen(intermediate_key(queue.key)) == 0 and queue.count == 0


@pytest.mark.parametrize("fate", ["finished", "deleted", "queued_again"])
def test_a_job_that_ended_or_waits_again_is_not_queued_twice(redis_server, fate: str) -> None:
    connection = redis_server.client()
    queue = _stranded(connection, "ended", behind=0)
    if fate == "finished":
        connection.hset(Job.key_for("ended"), "status", "finished")
    elif fate == "deleted":
        connection.delete(Job.key_for("ended"))
    else:
        connection.rpush(queue.key, "ended")
    requeue_stranded(queue)
    _age_sighting(connection, "impl", "ended", STRANDED_AFTER_SECONDS + 1)
    assert requeue_stranded(queue) == 0
    assert connection.llen(intermediate_key(queue.key)) == 0
    assert queue.get_job_ids().count("ended") == (1 if fate == "queued_again" else 0)


def test_passes_racing_put_a_stranded_job_back_once(redis_server) -> None:
    connection = redis_server.client()
    queue = _stranded(connection, "raced", behind=0)
    requeue_stranded(queue)
    _age_sighting(connection, "impl", "raced", STRANDED_AFTER_SECONDS + 1)
    moved: list[int] = []
    start = threading.Barrier(6)

    def one_pass() -> None:
        own = Queue("impl", connection=redis_server.client(), serializer=JSONSerializer)
        start.wait()
        moved.append(requeue_stranded(own))

    threads = [threading.Thread(target=one_pass) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(moved) == 1 and queue.get_job_ids() == ["raced"]


# ------------------------------------------------------------------ the cut, end to end


def _watch_for_wait(redis_server: RedisServer, queue_key: str, seen: threading.Event, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with redis.Redis(port=redis_server.port, socket_timeout=None).monitor() as monitor:
                while not stop.is_set():
                    command = monitor.next_command()["command"]
                    # (BLPOP: how a lane of two queues waited before worker.dequeue; this test failed then)
                    if command.startswith((f"BLMOVE {queue_key} ", f"BLPOP {queue_key} ")):
                        seen.set()
                        return
        except redis.RedisError:  # a quiet Redis while the worker starts: watch again
            continue


def test_a_job_answered_into_a_cut_is_run_after_it(redis_server: RedisServer) -> None:
    """An idle lane of two queues waits for a job; the network to it is cut; a job is queued and
    Redis hands it to that lane, whose answer never arrives (its client gives the connection up
    after its socket timeout). The cut heals: the job is put back by the maintenance and run,
    once, with its right reward (at the maintenance's second look: a minute or two)."""
    # the maintenance every 10 s: an idle lane's wait is 5 s, time enough to queue into it
    lane_env = {**FAST_QUEUE, "SCALING_GRADER_QUEUE__MAINTENANCE_INTERVAL": "10"}
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    connection = redis_server.client()
    proxy = PausableProxy(redis_server.port)
    victim = start_worker(proxy.url, "cut-idle", lane_env)  # one lane, queues impl and judge
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
            until(lambda: client.get("/readyz").status_code == 200, 120, "a live worker")
            seen, stop = threading.Event(), threading.Event()
            watcher = threading.Thread(target=_watch_for_wait, args=(redis_server, "rq:queue:impl", seen, stop),
                                       daemon=True)
            watcher.start()
            assert seen.wait(120), "the idle lane never waited on the impl queue"
            stop.set()
            proxy.pause()
            response = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT,
                                                      "wait": 0, "request_id": "into-the-cut"})
            assert response.status_code == 202, response.text
            job_id = response.json()["job_id"]
            # Redis answered the waiting lane: the job left its queue
            until(lambda: connection.llen("rq:queue:impl") == 0, 10, "the cut-off lane's wait to take the job")
            # a 20 s cut: past the lane's socket timeout (RQ's dequeue timeout + 10 s, 15 s here), so
            # the lane gives its connection up, and the answer with it (a shorter cut delivers it late)
            time.sleep(20)
            proxy.resume()
            deadline = time.monotonic() + 300
            body: dict = {}
            while time.monotonic() < deadline and body.get("status") != "finished":
                body = client.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json()
            assert body.get("status") == "finished", body
            assert body["result"]["reward"] == 1.0
            assert body["result"]["details"]["attempt"] == 1  # never started before
        assert victim.poll() is None  # reconnected, still working
        assert sum(int(v) for v in connection.hvals("sg:grades:total")) == 1
        assert connection.llen(intermediate_key("rq:queue:impl")) == 0 and connection.llen("rq:queue:impl") == 0
    finally:
        stop_worker(victim)
        proxy.close()


def test_a_lane_sends_its_count_of_jobs_done_once_for_a_run_of_jobs_as_it_goes_idle(redis_server) -> None:
    # a real lane: jobs back to back cost no count each; the count goes out as the lane, its queues
    # empty, waits for work (worker.dequeue's before_wait), while it lives
    connection = redis_server.client()
    for n in range(3):
        _queued(connection, "impl", f"run-{n}", result_ttl=0)  # the service's jobs keep no RQ result
    proxy = CountingProxy(redis_server.port, b"successful_job_count")
    lane = start_worker(proxy.url, "counted", FAST_QUEUE)
    try:
        until(lambda: connection.hget("rq:worker:counted", "successful_job_count") == b"3", 60,
              "the lane's count of its three jobs")
        assert lane.poll() is None  # sent by a live lane, not by its stop
        assert proxy.seen == 1
    finally:
        stop_worker(lane)
        proxy.close()

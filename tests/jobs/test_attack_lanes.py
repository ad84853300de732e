"""Attacks on the worker's lanes (worker/lanes.py, worker/lane.py, worker/grading_worker.py,
worker/deadline.py), with real Redis, real worker processes, real sandboxes and a real API: a
worker process killed alone (not its process group) leaves no lane or sandbox behind; a job past
its backstop deadline ends without waiting out its cases, which leave nothing behind; a lane
stopped past its cases' wall limit does not turn finished cases into timeouts; 200 jobs leave no
zombie of the worker or its lanes and no growing number of open files; a lost result
announcement, a group stop sent twice, and a Redis kill longer than the grace change no result."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import httpx
import pytest

from tests.support.impl_jobs import EXERCISE, FAST_QUEUE, RIGHT, collect, completion
from tests.support.proc_tree import descendants as _descendants
from tests.support.proc_tree import stat as _stat
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

pytestmark = pytest.mark.slow  # real workers, servers and sandboxes

# Right, and each case holds its lane for two seconds: still running when the test strikes.
SLOW_RIGHT = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math, time\n"
    "    time.sleep(2.0)\n"
    "    return math.ceil(peak_flops * bytes_per_weight / (2 * hbm_bandwidth) - 1e-9)\n"
)
# Never returns: each case would run until the sandbox's wall limit ends it.
HANGS = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import time\n"
    "    time.sleep(600)\n"
)


# --- the process tree, read from /proc -------------------------------------------------------


def _parent(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[1]


def _alive(pids: set[int]) -> set[int]:
    """The pids still running (a zombie is not running, but is counted apart: _zombies)."""
    return {pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] != "Z"}


def _zombies(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] == "Z"}


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _describe(pids: set[int]) -> list[str]:
    described = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")
            described.append(f"{pid} {_stat(pid)} {argv[:120]}")
        except OSError:
            described.append(f"{pid} gone")
    return described


def _kill_all(pids: set[int]) -> None:
    """Clean up after a failed attack: only processes this test's worker started."""
    for pid in _alive(pids):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# --- the API and RQ's records ----------------------------------------------------------------

def _submit(client: httpx.Client, text: str, request_id: str) -> str:
    r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": text, "wait": 0,
                                       "request_id": request_id, "all_or_nothing": True})
    # 200: an idle lane graded the job before the API's one look for its result after queueing it
    # (wait 0 does not wait, but answers a result that is already there)
    assert r.status_code in (200, 202), r.text
    return str(r.json()["job_id"])


def _holder(redis_server: RedisServer, job_id: str) -> str | None:
    name, status = redis_server.client().hmget(f"rq:job:{job_id}", "worker_name", "status")
    return name.decode() if status == b"started" and name else None


def _attempts(redis_server: RedisServer, job_id: str) -> int:
    return int(redis_server.client().get(f"sg:attempts:{job_id}") or 0)


def _wait_until_graded(redis_server: RedisServer, job_id: str, timeout: float = 180) -> str:
    """The lane holding job_id once its attempt has begun grading."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = _holder(redis_server, job_id)
        if holder and _attempts(redis_server, job_id):
            return holder
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never began grading")


def _wait_for_presence(redis_server: RedisServer, names: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(redis_server.client().exists(f"sg:worker:{name}") for name in names):
            return
        time.sleep(0.1)
    raise AssertionError(f"lanes {names} never all started")


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pids):
        time.sleep(0.1)
    return _alive(pids)


# --- attacks ---------------------------------------------------------------------------------

def test_killing_only_the_worker_process_leaves_no_lane_or_sandbox_running(redis_server) -> None:
    # SIGKILL to the worker process alone (a supervisor's kill of the main pid, an OOM kill), not
    # its process group: lanes left running would finish jobs another worker re-runs, and hold
    # sandboxes nobody supervises.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        victim = start_worker(redis_server.url, "orphan", FAST_QUEUE, jobs=2)
        tree: set[int] = set()
        survivor = None
        try:
            _wait_for_presence(redis_server, ["orphan", "orphan-2"])
            job_id = _submit(client, SLOW_RIGHT, "orphan-1")
            _wait_until_graded(redis_server, job_id)
            tree = _descendants(victim.pid)
            assert tree, "the worker started no lane"
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            left = _wait_gone(tree, timeout=20)
            survivor = start_worker(redis_server.url, "heir", FAST_QUEUE, jobs=1)
            results = collect(client, [job_id], timeout=240)
        finally:
            stop_worker(victim)
            _kill_all(tree)
            if survivor is not None:
                stop_worker(survivor)
    assert not left, f"processes of the killed worker still run: {sorted(left)}"
    body = results[job_id]
    assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
    assert body["result"]["details"]["attempt"] == 2  # begun by a killed lane, finished by the heir


def test_a_job_past_its_deadline_ends_without_waiting_out_its_cases_and_leaves_none_behind(redis_server) -> None:
    # SIGALRM's GradingDeadline is raised inside the grader while it waits on its cases. Found:
    # the grader's thread pool then waited for every case, the ones not yet begun included, each
    # up to its wall limit, so the deadline ended nothing. Now the job ends while its hung cases
    # still run; they end by their own wall limit, and leave no process or zombie behind.
    wall = 40
    deadline = {"SCALING_GRADER_QUEUE__JOB_TIMEOUT": "8", "SCALING_GRADER_QUEUE__RETRIES": "0",
                "SCALING_GRADER_SANDBOX__WALL_SECONDS": str(wall)}
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE, **deadline}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        worker = start_worker(redis_server.url, "alarm", {**FAST_QUEUE, **deadline}, jobs=1)
        tree: set[int] = set()
        try:
            _wait_for_presence(redis_server, ["alarm"])
            warmup = _submit(client, RIGHT, "alarm-right")  # starts the lane's sandbox and its warm pool
            assert collect(client, [warmup], timeout=120)[warmup]["result"]["reward"] == 1.0
            time.sleep(3)  # the warm pool refills
            warm = _alive(_descendants(worker.pid))
            hung = _submit(client, HANGS, "alarm-hung")
            _wait_until_graded(redis_server, hung)
            began = time.monotonic()
            time.sleep(1)
            busy = _alive(_descendants(worker.pid))
            lanes = {pid for pid in busy if _parent(pid) == worker.pid}
            results = collect(client, [hung], timeout=120)
            # not a speed figure: whether the result came before a hung case could have ended
            ended_before_wall = time.monotonic() - began < wall
            deadline_at = time.monotonic() + wall + 30  # each hung case ends by its wall limit
            while time.monotonic() < deadline_at and len(_alive(_descendants(worker.pid))) > len(warm):
                time.sleep(0.5)
            time.sleep(2)
            after = _descendants(worker.pid)
            tree = warm | busy | after
            # The sandbox's fork server reaps its finished cases lazily, at its next fork (a bounded
            # few, inside the sandbox's pid namespace); the lane's and the worker's own children must
            # be reaped at once.
            zombies = _describe({pid for pid in _zombies(after) if _parent(pid) in (worker.pid, *lanes)})
            left = _alive(after)
            alive = worker.poll() is None
        finally:
            stop_worker(worker)
            _kill_all(tree)
    assert alive
    assert results[hung]["status"] == "failed" and results[hung]["result"]["reward"] == 0.0, results[hung]
    assert busy - warm, "the hung cases ran in no process of their own"
    # the deadline (8 s) ended the job before its hung cases' wall limit (40 s): it did not wait them out
    assert ended_before_wall, "the job's result waited for its hung cases' wall limit"
    assert len(left) <= len(warm), f"more processes than a warm lane's after the cases' wall limit: {_describe(left)}"
    assert not zombies, f"zombies of the worker or its lane: {zombies}"


def test_a_worker_that_ran_many_jobs_holds_no_zombie_and_no_growing_number_of_files(redis_server) -> None:
    # Every job takes sandbox children, pipes and pidfds; a lane that leaked one of each per job
    # would run out of files (or pids) after a day. The same completion earns the same reward
    # each time, and each job has exactly one result.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    first, more = 10, 190
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        worker = start_worker(redis_server.url, "many", FAST_QUEUE, jobs=2)
        tree: set[int] = set()
        try:
            _wait_for_presence(redis_server, ["many", "many-2"])
            lanes = {pid for pid in _descendants(worker.pid) if _parent(pid) == worker.pid}
            assert len(lanes) == 2
            early = collect(client, [_submit(client, RIGHT, f"many-{i}") for i in range(first)], timeout=240)
            time.sleep(3)  # warm pools refill
            fds_early = {pid: _open_fds(pid) for pid in lanes}
            late_ids = [_submit(client, RIGHT, f"many-{i}") for i in range(first, first + more)]
            late = collect(client, late_ids, timeout=600)
            time.sleep(3)
            fds_late = {pid: _open_fds(pid) for pid in lanes}
            tree = _descendants(worker.pid)
            own_zombies = _describe({pid for pid in _zombies(tree) if _parent(pid) in (worker.pid, *lanes)})
            all_zombies = _zombies(tree)
            results = redis_server.client().keys("sg:result:*")
        finally:
            stop_worker(worker)
            _kill_all(tree)
    bodies = list(early.values()) + list(late.values())
    assert len(bodies) == first + more
    assert {b["result"]["reward"] for b in bodies} == {1.0}, [b["result"]["explanation"] for b in bodies]
    assert len(results) == first + more  # one result per job
    assert not own_zombies, own_zombies
    # the fork servers reap lazily (at their next fork): a few per lane, not one per job
    assert len(all_zombies) < more // 2, _describe(all_zombies)
    for pid in lanes:  # a few more files at most (a connection, a pool child), not one per job
        assert fds_late[pid] <= fds_early[pid] + 5, (fds_early, fds_late)


def test_a_waiting_request_gets_its_result_when_the_announcement_is_lost(redis_server) -> None:
    # The API's subscription to the results channel is cut again and again while a request waits
    # (CLIENT KILL of every pub/sub connection): the announcement of the result is lost, and the
    # waiting request must still answer with it, not time out as "started".
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=90) as client:
        worker = start_worker(redis_server.url, "deaf", FAST_QUEUE, jobs=1)
        try:
            _wait_for_presence(redis_server, ["deaf"])
            job_id = _submit(client, SLOW_RIGHT, "deaf-1")
            answer: dict[str, httpx.Response] = {}
            waiter = threading.Thread(target=lambda: answer.setdefault(
                "r", client.get(f"/v1/jobs/{job_id}", params={"wait": 50})))
            waiter.start()
            admin = redis_server.client()
            cuts = 0
            while waiter.is_alive():
                cuts += int(admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub") or 0)
                time.sleep(0.05)
            waiter.join()
        finally:
            stop_worker(worker)
    assert cuts > 0  # the subscription really was cut
    body = answer["r"].json()
    assert answer["r"].status_code == 200 and body["status"] == "finished", body
    assert body["result"]["reward"] == 1.0


def test_a_stop_sent_to_the_whole_process_group_twice_quickly_stays_a_warm_stop(redis_server) -> None:
    # A supervisor that signals the process group (systemd's default, `kill -TERM -PGID`, Ctrl-C
    # in a terminal) reaches each lane twice: directly and forwarded by the worker process; and an
    # impatient operator sends it again at once. Within a second that is one request: the job in
    # hand finishes (once, right) and nothing is cut short.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        worker = start_worker(redis_server.url, "twice", FAST_QUEUE, jobs=2)
        try:
            _wait_for_presence(redis_server, ["twice", "twice-2"])
            job_id = _submit(client, SLOW_RIGHT, "twice-1")
            _wait_until_graded(redis_server, job_id)
            os.killpg(worker.pid, signal.SIGTERM)
            time.sleep(0.2)
            os.killpg(worker.pid, signal.SIGTERM)
            code = worker.wait(timeout=180)
            results = collect(client, [job_id], timeout=30)
        finally:
            stop_worker(worker)
    assert code == 0  # a warm stop, not a cold one
    body = results[job_id]
    assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
    assert body["result"]["details"]["attempt"] == 1  # finished by the lane that held it, not re-run


# Right; each case takes a second of its three-second wall limit.
SECOND_RIGHT = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math, time\n"
    "    time.sleep(1.0)\n"
    "    return math.ceil(peak_flops * bytes_per_weight / (2 * hbm_bandwidth) - 1e-9)\n"
)


def test_a_lane_stopped_past_a_cases_wall_limit_does_not_turn_a_finished_case_into_a_timeout(redis_server) -> None:
    # Only the lane is stopped (SIGSTOP: a debugger, a starved or throttled process), not its
    # sandboxes: each case finishes in a second and its result waits in the pipe. The lease
    # outlives the stop (a long grace), so no other attempt exists: whatever this attempt
    # writes is the job's result, and the same completion earned 1.0 unstopped (the control).
    queue = {**FAST_QUEUE, "SCALING_GRADER_QUEUE__HEARTBEAT_GRACE": "60", "SCALING_GRADER_SANDBOX__WALL_SECONDS": "3"}
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **queue}
    with running_server(env) as url, httpx.Client(base_url=url, timeout=30) as client:
        worker = start_worker(redis_server.url, "paused", queue, jobs=1)
        lane = None
        try:
            _wait_for_presence(redis_server, ["paused"])
            control = _submit(client, SECOND_RIGHT, "paused-control")
            assert collect(client, [control], timeout=120)[control]["result"]["reward"] == 1.0
            (lane,) = {pid for pid in _descendants(worker.pid) if _parent(pid) == worker.pid}
            job_id = _submit(client, SECOND_RIGHT, "paused-1")
            _wait_until_graded(redis_server, job_id)
            time.sleep(0.3)  # the cases are running
            os.kill(lane, signal.SIGSTOP)
            time.sleep(5)  # past the cases' wall limit; they finished meanwhile
            os.kill(lane, signal.SIGCONT)
            results = collect(client, [job_id], timeout=120)
        finally:
            if lane is not None:
                with contextlib.suppress(OSError):
                    os.kill(lane, signal.SIGCONT)
            stop_worker(worker)
    body = results[job_id]
    assert body["result"]["details"]["attempt"] == 1  # no re-run: the lane kept its lease
    assert body["result"]["reward"] == 1.0, body["result"].get("details", {}).get("counts")


def test_lanes_ride_out_a_redis_kill_longer_than_their_grace_and_write_each_result_once(redis_server) -> None:
    # Redis dies mid-job for longer than the heartbeat grace: the leases and heartbeats lapse,
    # the jobs look abandoned and are re-queued while their lanes still grade them. Neither lane
    # exits; each job still gets exactly one result, counted once, right.
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    worker = start_worker(redis_server.url, "outage", FAST_QUEUE, jobs=2)
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=60) as client:
            _wait_for_presence(redis_server, ["outage", "outage-2"])
            job_ids = [_submit(client, SLOW_RIGHT, f"outage-{i}") for i in range(4)]
            for job_id in job_ids[:2]:
                _wait_until_graded(redis_server, job_id)
            assert redis_server.process is not None
            redis_server.process.kill()  # no clean shutdown; the AOF keeps every write
            redis_server.process.wait()
            redis_server.process = None
            time.sleep(6)
            redis_server.start()
            deadline = time.monotonic() + 30
            while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            results = collect(client, job_ids, timeout=300)
            alive = worker.poll() is None
    finally:
        stop_worker(worker)
    assert alive  # the lanes reconnected; none exited
    assert len(results) == len(job_ids)
    for body in results.values():
        assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
    stored = redis_server.client()
    assert all(stored.exists(f"sg:result:{job_id}") for job_id in job_ids)
    totals = {k.decode(): int(v) for k, v in stored.hgetall("sg:grades:total").items()}
    assert sum(totals.values()) == len(job_ids), totals  # each counted once

"""Redis commands per queued impl job: a real Redis, the API and one worker, impl grades posted
by 4 clients that each wait for their result. Redis's own command counters (INFO commandstats,
reset before each run) give the commands per job, all included: the API's claim, enqueue and
wait, the worker's dequeue, lease, result and counting, RQ's bookkeeping, and the heartbeats and
maintenance of the worker in that time. Measured twice in the same run: with results waited for
by notification (the default) and by polling (a GET every 100 ms, how the API waited before).
Target: at most 40 commands per job, printed with the ratio against polling, and every command's
count per job.

Then jobs of several seconds (every case sleeps), one at a time: their commands per job, all in,
and what a busy lane's heartbeats and upkeep add per second of grading, the figure that makes a
long job cost more than a short one.

Also printed: whose commands they are (RQ's own bookkeeping of a job, keys under ``rq:``, against
the service's, keys under ``sg:`` and its scripts), from Redis's MONITOR stream over a few more
jobs; Redis CPU per job and the commands an idle worker lane costs per second, the two figures
that size how many worker cores one Redis feeds (docs/deployment.md)."""

from __future__ import annotations

import concurrent.futures
import inspect
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import httpx
import redis

from app.tasks.impl import reference
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

EXERCISE = "critical_batch_size"
QUEUE = {"SCALING_GRADER_SANDBOX__WARM_POOL_SIZE": "1"}  # default heartbeats and maintenance
RIGHT = f"```python\n{inspect.getsource(getattr(reference, EXERCISE))}\n```\n"
CLIENTS = 4
# a slow case sleeps this long: its job outlasts a heartbeat interval (5 s), within the wall limit
SLOW_CASE_SECONDS = 6.0


def _commands(connection: redis.Redis) -> dict[str, int]:
    stats = connection.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _redis_cpu(connection: redis.Redis) -> float:
    cpu = connection.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def _run(server: RedisServer, wait_mode: str, jobs: int, completion: str = RIGHT,
         clients: int = CLIENTS) -> tuple[float, float, float, dict[str, int]]:
    """Commands per job, Redis CPU ms per job, lane seconds per job, and the busiest commands,
    for one wait mode."""
    env = {"SCALING_GRADER_REDIS_URL": server.url, "SCALING_GRADER_QUEUE__RESULT_WAIT": wait_mode, **QUEUE}
    run = f"{wait_mode}-{uuid.uuid4().hex[:8]}"  # request ids of this run's own: no run answers another's
    connection = server.client()
    worker = start_worker(server.url, f"bench-{wait_mode}", QUEUE)
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=120) as client:
            warm = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 60})
            assert warm.status_code == 200, warm.text
            connection.config_resetstat()
            cpu = _redis_cpu(connection)

            def grade(i: int) -> float:
                r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": completion,
                                                   "wait": 120, "request_id": f"{run}-{i}"})
                assert r.status_code == 200, r.text
                return float(r.json()["reward"])

            start = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                rewards = list(pool.map(grade, range(jobs)))
            lane_seconds = (time.monotonic() - start) / jobs  # one lane, never idle while clients wait
            assert rewards == [1.0] * jobs
            cpu = _redis_cpu(connection) - cpu
            counts = _commands(connection)
    finally:
        stop_worker(worker)
    counts.pop("info", None)
    counts.pop("config|resetstat", None)
    return sum(counts.values()) / jobs, 1000 * cpu / jobs, lane_seconds, counts


def _owner(command: str) -> str:
    """``rq`` for RQ's own commands (its keys, its transactions, its blocking dequeue and
    connection set-up), ``sg`` for the service's (its keys and Lua scripts)."""
    words = command.split()
    name = words[0].upper() if words else ""
    if name in ("EVAL", "EVALSHA") or (len(words) > 1 and words[1].startswith("sg:")):
        return "sg"
    return "rq"


def _by_owner(server: RedisServer, jobs: int) -> dict[str, float]:
    """Commands per job by owner, read from MONITOR while `jobs` impl jobs are graded one by one
    (the MONITOR connection's own commands excluded)."""
    worker = start_worker(server.url, "bench-owner", QUEUE)
    env = {"SCALING_GRADER_REDIS_URL": server.url, **QUEUE}
    seen: dict[str, int] = {"rq": 0, "sg": 0}
    stop = threading.Event()
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=120) as client:
            warm = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 60})
            assert warm.status_code == 200, warm.text
            monitored = redis.Redis(port=server.port)

            def listen() -> None:
                with monitored.monitor() as monitor:
                    for event in monitor.listen():
                        if stop.is_set():
                            return
                        seen[_owner(str(event["command"]))] += 1

            listener = threading.Thread(target=listen, daemon=True)
            listener.start()
            time.sleep(0.5)
            for i in range(jobs):
                r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 60,
                                                   "request_id": f"owner-{i}"})
                assert r.status_code == 200 and r.json()["reward"] == 1.0, r.text
            counted = dict(seen)
            stop.set()
            server.client().ping()  # one more event, so the listener sees the stop
            listener.join(timeout=10)
    finally:
        stop_worker(worker)
    return {owner: n / jobs for owner, n in counted.items()}


def _idle_lane_rate(server: RedisServer, seconds: float) -> float:
    """Commands per second per idle lane (two lanes, no jobs)."""
    worker = start_worker(server.url, "bench-idle", QUEUE, jobs=2)
    connection = server.client()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not connection.exists("sg:worker:bench-idle-2"):
            time.sleep(0.2)
        time.sleep(2)
        connection.config_resetstat()
        time.sleep(seconds)
        counts = _commands(connection)
    finally:
        stop_worker(worker)
    counts.pop("info", None)
    return sum(counts.values()) / seconds / 2


def _slow(seconds: float) -> str:
    """The right answer, sleeping ``seconds`` in every case: a job as long as a hostile one."""
    return RIGHT.replace("def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n",
                         "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
                         f"    import time\n    time.sleep({seconds})\n")


def _beat_lag_when_starved(server: RedisServer, seconds: float) -> float:
    """The worst lateness of a lane's heartbeat thread while the lane grades slow cases and every
    core runs two busy loops of the same priority: what the heartbeat grace must cover."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    worker = start_worker(server.url, "bench-starved", QUEUE)
    slow = _slow(SLOW_CASE_SECONDS)
    env = {"SCALING_GRADER_REDIS_URL": server.url, **QUEUE}
    try:
        with running_server(env) as url, httpx.Client(base_url=url, timeout=300) as client:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                r = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": slow, "wait": 60})
                assert r.status_code == 200, r.text
        record = server.client().get("sg:worker:bench-starved")
        assert record is not None
        return float(json.loads(record)["beat_lag_max"])
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        stop_worker(worker)


def main(smoke: bool = False) -> None:
    jobs = 6 if smoke else 60
    server = RedisServer().start()
    try:
        polled, polled_cpu, _, _ = _run(server, "poll", jobs)
        notified, notified_cpu, lane_seconds, counts = _run(server, "notify", jobs)
        # jobs of several seconds, one at a time: what a busy lane's beats add to a job
        # and the same number of quick jobs one at a time, so that only the jobs' length differs
        single, _, single_lane_seconds, _ = _run(server, "notify", 2 if smoke else 6, clients=1)
        long, _, long_lane_seconds, _ = _run(server, "notify", 2 if smoke else 6, _slow(SLOW_CASE_SECONDS), clients=1)
        owners = _by_owner(server, 3 if smoke else 20)
        idle = _idle_lane_rate(server, 3 if smoke else 30)
        # (not in smoke runs: they run beside the test suite, whose CPU the busy loops would take)
        lag = None if smoke else _beat_lag_when_starved(server, 60)
    finally:
        server.close()
    busiest = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
    print(f"impl jobs per run: {jobs}, {CLIENTS} clients waiting, one worker lane")
    print(f"commands per job, results waited for by polling:      {polled:6.1f}  (Redis CPU {polled_cpu:.2f} ms)")
    print(f"commands per job, results waited for by notification: {notified:6.1f}  (Redis CPU {notified_cpu:.2f} ms)")
    print(f"ratio notification/polling: {notified / polled:.2f}  (target: at most 40 commands per job)")
    print("busiest commands (notification): " + ", ".join(f"{name} {n / jobs:.1f}" for name, n in busiest))
    every = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    print("every command per job (notification; commands run by scripts counted apart, as Redis counts them): "
          + ", ".join(f"{name} {n / jobs:.2f}" for name, n in every))
    beats = (long - single) / max(1e-9, long_lane_seconds - single_lane_seconds)
    print(f"one at a time: jobs of {single_lane_seconds:.1f} s {single:.1f} commands per job, all in; jobs of "
          f"{long_lane_seconds:.1f} s (every case sleeps {SLOW_CASE_SECONDS:.0f} s) {long:.1f}: a busy lane's beats "
          f"and upkeep add {beats:.2f} commands per second of grading")
    print(f"whose (MONITOR, jobs one at a time): RQ's own bookkeeping {owners['rq']:.1f} per job, "
          f"the service's {owners['sg']:.1f} per job")
    print(f"an idle worker lane: {idle:.2f} commands/s")
    # One Redis core kept half busy (headroom for bursts and the API's other commands).
    lanes = 0.5 / (notified_cpu / 1000) * lane_seconds
    print(f"lane seconds per job {lane_seconds:.2f}: one Redis core at 50% feeds about {lanes:.0f} busy lanes "
          "(worker cores) grading this exercise")
    if lag is not None:
        print(f"heartbeat thread's worst lateness with every core running 2 busy loops: {1000 * lag:.0f} ms")

"""The stack soak's clients behave as rollout workers: each posts a completion, waits for its reward
with the API's wait (no polling), and posts the next. Run against a real server: every answered job
is recorded as the job's view shows it, so the soak's checks (rewritten, differing rewards) compare
like with like, and the reference completion earns the full reward."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from bench.bench_stack_soak import Ledger, SoakStack, _calls, _verdict, impl_alone, rollout_worker
from tests.support.impl_jobs import FAST_QUEUE
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker


@pytest.mark.slow  # impl grades, hostile ones among them, in a real server
def test_rollout_workers_wait_for_their_rewards() -> None:
    with running_server() as url:
        soak = SoakStack("unused", int(url.rsplit(":", 1)[1]), {}, api_key="open-mode-ignores-keys")
        ledger, stop = Ledger(), threading.Event()
        workers = [threading.Thread(target=rollout_worker, args=(soak, ledger, stop, i, []), daemon=True)
                   for i in range(3)]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            with ledger.lock:
                if len(ledger.first_result) >= 6:
                    break
            time.sleep(0.5)
        stop.set()
        for w in workers:
            w.join(timeout=90)
    assert not any(w.is_alive() for w in workers)
    assert len(ledger.first_result) >= 6, dict(ledger.submit_errors)
    rewards: dict[str, set] = {}
    for job_id, body in ledger.first_result.items():
        status, reward, _ = _verdict(body)
        assert status in ("finished", "failed") and body["job_id"] == job_id
        assert reward is not None
        rewards.setdefault(ledger.jobs[job_id][1], set()).add(reward)
    assert all(len(v) == 1 for v in rewards.values()), rewards
    assert rewards.get("right", {1.0}) == {1.0}


def test_command_calls_between_two_readings() -> None:
    before = {"calls:get": 3, "calls:hset": 1, "used_memory": 10}
    after = {"calls:get": 5, "calls:hset": 1, "calls:eval": 2, "calls:info": 7, "used_memory": 99}
    assert _calls(before, after) == {"get": 2, "hset": 0, "eval": 2}  # not the soak's own INFO reads


class _LocalRedisSoak(SoakStack):
    """The soak's view of a stack whose Redis is a local one: redis-cli on the host, not in a
    container (the soak's own readings of Redis's counters go through the same parsing)."""

    redis_port: int = 0

    def redis(self, *args: str) -> str:
        done = subprocess.run(["redis-cli", "-p", str(self.redis_port), *args], capture_output=True, text=True,
                              timeout=30, check=True)
        return done.stdout.strip()


@pytest.mark.slow  # a Redis, an API server and a worker, impl grades hostile ones among them
def test_impl_jobs_alone_count_every_command_of_the_jobs_answered_and_none_of_the_soaks() -> None:
    redis_server = RedisServer().start()
    worker = start_worker(redis_server.url, "alone", FAST_QUEUE)
    try:
        with running_server({"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}) as url:
            soak = _LocalRedisSoak("unused", int(url.rsplit(":", 1)[1]), {}, api_key="open-mode-ignores-keys")
            soak.redis_port = redis_server.port
            alone = impl_alone(soak, 8.0, clients=3)
            after = redis_server.client().info("commandstats")
    finally:
        stop_worker(worker)
        redis_server.close()
    assert alone["answered"] == alone["sent"] > 0  # every job out when the posts stopped was waited for
    assert sum(alone["kinds"].values()) == alone["answered"]
    calls = alone["calls"]
    assert "info" not in calls  # the soak's own readings are left out
    # every job of the window was enqueued and taken in it: its commands are all counted. A lane
    # takes a job with one move (LMOVE, or BLMOVE when it waits: worker.dequeue), and Redis counts
    # a BLMOVE when it is called, not when it returns: the one lane's wait that takes the window's
    # first job was called before the window, so one take per job less at most
    takes = calls.get("lmove", 0) + calls.get("blmove", 0)
    assert calls["rpush"] == alone["sent"] and takes >= alone["sent"] - 1 and "blpop" not in calls
    assert int(after["cmdstat_rpush"]["calls"]) == alone["sent"]

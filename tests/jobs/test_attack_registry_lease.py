"""Attacks on the registry-entry lease (app.jobs.leases + worker.grading_worker), the two-command
enqueue (app.jobs.rq_enqueue) and the token bucket under skewed API clocks (app.ratelimit), by a
reviewer who did not write them. Their first run found two bugs, both of clocks: the lease
compared the lanes' entries with Redis's clock (a stale lane whose host clock lagged wrote beside
a live one; a lane beating on time was taken over), and the token bucket on the caller's clock
let a replica whose clock led lock a tenant out. The lease now takes an entry that is there for
alive (RQ's cleanup decides, with the lanes' scores in Redis's time), and the bucket is back on
Redis's clock."""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

import pytest
import redis.asyncio as aioredis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

import app.ratelimit as ratelimit_module
import worker.grading_worker as grading_worker
from app.jobs import keys
from app.jobs.grade_log import grade_count
from app.jobs.leases import Lease, new_token
from app.jobs.rq_enqueue import LeanEnqueue
from app.ratelimit import RateLimiter
from tests.jobs.test_redis_token_bucket import _close
from tests.jobs.test_rq_contract import _running, _started, _worker, sleeps

pytestmark = pytest.mark.slow  # a Redis server per test

COUNT = grade_count("exam", "numeric", "correct", tenant="t")


class _SkewedTime(types.SimpleNamespace):
    """A stand-in for the ``time`` module of one module under test: wall clock shifted by
    ``skew`` seconds (a host whose clock is off), monotonic and sleep as they are."""

    def __init__(self, skew: float) -> None:
        super().__init__(skew=skew)

    def time(self) -> float:
        return time.time() + self.skew

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _queue(connection: Any) -> Queue:
    return Queue("contract", connection=connection, serializer=JSONSerializer)


def _totals(connection: Any) -> int:
    from app.jobs.grade_log import TOTALS_KEY
    return sum(int(v) for v in connection.hgetall(TOTALS_KEY).values())


def _only_the_holder_writes(connection: Any, holder: Lease, fenced: Lease, late: Lease) -> None:
    """``fenced`` writes nothing while ``holder`` lives, ``holder`` writes the result, ``late``
    (after it) finds it written; the grade is counted once."""
    assert fenced.publish('{"reward": 0.0}', "t", 60, COUNT) == -1
    assert holder.publish('{"reward": 1.0}', "t", 60, COUNT) == 1
    assert late.publish('{"reward": 0.0}', "t", 60, COUNT) == 0
    assert _totals(connection) == 1


# ---------------------------------------------------------------- 1. clocks: Redis's vs the workers'


@pytest.mark.parametrize("skew", [0.0, -30.0])  # 0.0: the control, no skew
def test_a_stale_attempt_is_fenced_while_the_new_one_lives_when_the_workers_clocks_lag_redis_s(
        redis_server, monkeypatch, skew: float) -> None:
    # Every worker shares one clock (one host, NTP-less or a VM after a pause), 30 s behind the
    # Redis host's: RQ's own view is consistent (its cleanup reads the same clock the beats
    # write), so nothing is re-queued wrongly. Lane A stops past its TTL; RQ re-queues; lane B
    # takes the job over and beats, alive. A comes back: it must be fenced while B lives.
    connection = redis_server.client()
    queue = _queue(connection)
    queue.enqueue(sleeps, 0, job_id="skew-stale", retry=Retry(max=2, enqueue_at_front=True))
    a, job_a, _execution_a, lease_a = _running(connection, queue, "a-lags")
    time.sleep(a.get_heartbeat_ttl(job_a) + 1.5)  # A stopped
    _worker(connection, "cleaner").clean_registries()
    assert job_a.get_status() == JobStatus.QUEUED
    b, job_b, execution_b, _ = _started(connection, queue, "b-lags")
    lease_b = b._job_lease(job_b, execution_b)
    assert lease_b.take(60) == 2  # A's entry is gone: taken over (right)
    monkeypatch.setattr(grading_worker, "time", _SkewedTime(skew))  # the workers' clock from here on
    for _ in range(3):  # B beats, as its beat thread does: alive
        b._beat_once(job_b, execution_b, lease_b)
        assert not lease_b.lost
        time.sleep(0.3)
    # RQ (on the workers' clock) sees B alive: not re-queued
    queue.started_job_registry.cleanup(timestamp=time.time() + skew)
    assert job_b.get_status() == JobStatus.STARTED and queue.get_job_ids() == []
    # A comes back and publishes while B lives: it must be fenced
    assert lease_a.publish('{"reward": 0.0}', "t", 60, COUNT) == -1, "the stale attempt wrote beside a live one"


def _held_twice(connection: Any, monkeypatch: pytest.MonkeyPatch, skew: float,
                job_id: str) -> tuple[Any, Job, Any, Lease, Lease]:
    """A job RQ holds twice, on workers whose clocks are ``skew`` off: the first copy running with
    its lease taken (lane, job, execution, lease), and the second copy's lease, not yet taken."""
    queue = _queue(connection)
    for _ in range(2):
        queue.enqueue(sleeps, 0, job_id=job_id, retry=Retry(max=1, enqueue_at_front=True))
    monkeypatch.setattr(grading_worker, "time", _SkewedTime(skew))
    first, job, execution, lease = _running(connection, queue, "first")
    second_lane, second_job, second_execution, _ = _started(connection, queue, "second")
    return first, job, execution, lease, second_lane._job_lease(second_job, second_execution)


@pytest.mark.parametrize("skew", [0.0, -30.0])  # 0.0: the control, no skew
def test_a_second_copy_waits_while_the_first_beats_when_the_workers_clocks_lag_redis_s(
        redis_server, monkeypatch, skew: float) -> None:
    # RQ holds a job twice (app.jobs.redis_jobs): the second copy must not run beside the first
    # while the first lives, whatever the skew between Redis's host and the workers' host.
    first, job, execution, lease, second = _held_twice(redis_server.client(), monkeypatch, skew, "skew-twice")
    first._beat_once(job, execution, lease)
    assert not lease.lost
    assert second.take(60) == -1, "the second copy took the lease of a live, beating first copy"


@pytest.mark.parametrize("skew", [0.0, -1.5])  # 0.0: the control, no skew
def test_a_lane_beating_on_schedule_is_never_taken_over_under_a_skew_below_its_ttl(redis_server, monkeypatch,
                                                                                   skew: float) -> None:
    # The skew needed is less than the entry's TTL: the entry is ahead of Redis's clock by
    # TTL - skew just after a beat and by TTL - skew - interval just before the next. Here TTL 2 s,
    # interval 1 s, Redis 1.5 s ahead of the workers (in production terms: TTL 15 s, interval 5 s,
    # Redis ~11 s ahead): the first copy beats on time, every interval, and the second polls.
    first, job, execution, lease, second = _held_twice(redis_server.client(), monkeypatch, skew, "skew-small")
    first._beat_once(job, execution, lease)
    next_beat = time.monotonic() + first.job_monitoring_interval
    end = time.monotonic() + 4
    while time.monotonic() < end:
        if time.monotonic() >= next_beat:
            first._beat_once(job, execution, lease)
            next_beat += first.job_monitoring_interval
        assert second.take(60) == -1, "a lane beating on schedule was taken over"
        time.sleep(0.05)


@pytest.mark.parametrize("lead", [0.0, 30.0])  # 0.0: the control
def test_a_busy_beating_lane_keeps_its_lease_when_another_lane_s_clock_leads(redis_server, monkeypatch,
                                                                             lead: float) -> None:
    # One lane's host clock leads the beating lane's by 30 s (hosts apart). Its maintenance (the
    # look for abandoned jobs every interval, and RQ's whole pass) must not take the beating
    # lane's entry for lapsed: the lanes write and compare the scores in Redis's clock, each
    # measuring its host's offset from it, RQ's own pass included (its StartedJobRegistry is
    # cleaned in Redis's time). (Found with the first registry lease,
    # which compared the entries with Redis's clock: RQ's cleanup from the leading host re-queued
    # the live job and the re-run took the lease.)
    connection = redis_server.client()
    queue = _queue(connection)
    queue.enqueue(sleeps, 0, job_id="skew-ahead", retry=Retry(max=2, enqueue_at_front=True))
    live, job, execution, lease = _running(connection, queue, "live")
    live._beat_once(job, execution, lease)
    monkeypatch.setattr(grading_worker, "time", _SkewedTime(lead))  # the leading host's lane from here on
    ahead = _worker(connection, "ahead", grading_worker.GradingWorker)
    ahead.register_birth()  # measures its host's clock against Redis's
    assert abs(ahead._clock_offset() + lead) < 1.0
    connection.delete(keys.MINUTE_MAINTENANCE, keys.REGISTRY_MAINTENANCE)
    ahead.run_maintenance_tasks()  # the look, and RQ's whole pass (its turn)
    assert job.get_status() == JobStatus.STARTED and queue.get_job_ids() == []  # not taken for abandoned
    assert connection.get(keys.REGISTRY_MAINTENANCE) == b"ahead"  # RQ's whole pass ran, in Redis's time
    rerun = Lease(connection, job.id, new_token("rerun"), 60_000, registry=queue.started_job_registry.key)
    assert rerun.take(60) == -1, "a busy lane that beats lost its lease"


def test_a_host_clock_stepped_after_the_lane_measured_redis_s_moves_nothing(redis_server, monkeypatch) -> None:
    # The lane measured Redis's clock at its start; then its host's clock is stepped 30 s ahead (an
    # NTP step, an operator). Its scores and its look for abandoned jobs count from the monotonic
    # clock and do not move, and so does RQ's own pass, whose StartedJobRegistry the lanes clean
    # in Redis's time too.
    connection = redis_server.client()
    queue = _queue(connection)
    queue.enqueue(sleeps, 0, job_id="stepped", retry=Retry(max=2, enqueue_at_front=True))
    live, job, execution, lease = _running(connection, queue, "live")
    stepping = _worker(connection, "stepping", grading_worker.GradingWorker)
    stepping.register_birth()
    assert stepping._clock_agrees()
    monkeypatch.setattr(grading_worker, "time", _SkewedTime(30.0))  # stepped after the measurement
    assert not stepping._clock_agrees()
    live._beat_once(job, execution, lease)
    connection.delete(keys.MINUTE_MAINTENANCE, keys.REGISTRY_MAINTENANCE)
    stepping.run_maintenance_tasks()
    assert job.get_status() == JobStatus.STARTED and queue.get_job_ids() == []
    assert connection.get(keys.REGISTRY_MAINTENANCE) == b"stepping"  # RQ's whole pass ran
    score = connection.zscore(queue.started_job_registry.key, execution.composite_key)
    assert abs(score - (time.time() + live.get_heartbeat_ttl(job))) < 2  # Redis's time (this host's, unstepped)


# ---------------------------------------------------------------- 2. races with RQ's cleanup, flushes


def test_cleanup_racing_a_beat_leaves_one_writer_and_a_rerun_that_waits_then_ends(redis_server, monkeypatch) -> None:
    # RQ's cleanup reads the expired entry, re-queues the job, then the lane's beat moves the
    # entry ahead before the cleanup's ZREMRANGEBYSCORE: the entry survives (alive), the job is
    # queued again. The re-run must wait (-1) and then find the result (0): written once.
    connection = redis_server.client()
    queue = _queue(connection)
    queue.enqueue(sleeps, 0, job_id="race-beat", retry=Retry(max=2, enqueue_at_front=True))
    lane, job, execution, lease = _running(connection, queue, "racer")
    time.sleep(lane.get_heartbeat_ttl(job) + 1.5)
    original = StartedJobRegistry.get_expired_job_ids

    def expired_then_beat(self: StartedJobRegistry, timestamp: float | None = None) -> list[str]:
        found = original(self, timestamp)
        lane._beat_once(job, execution, lease)  # the beat lands between the read and the removal
        return found

    monkeypatch.setattr(StartedJobRegistry, "get_expired_job_ids", expired_then_beat)
    _worker(connection, "cleaner").clean_registries()
    monkeypatch.undo()
    assert queue.get_job_ids() == [job.id]
    assert execution.composite_key.encode() in connection.zrange(queue.started_job_registry.key, 0, -1)
    rerun_lane, rerun_job, rerun_execution, _ = _started(connection, queue, "rerun")
    rerun = rerun_lane._job_lease(rerun_job, rerun_execution)
    assert rerun.take(60) == -1
    assert lease.publish('{"reward": 1.0}', "t", 60, COUNT) == 1
    assert rerun.take(60) == 0
    assert rerun.publish('{"reward": 0.0}', "t", 60, COUNT) == 0
    assert _totals(connection) == 1


def test_a_redis_flush_mid_job_leaves_one_write_and_one_count(redis_server) -> None:
    connection = redis_server.client()
    queue = _queue(connection)
    lean = LeanEnqueue()
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="flushed", timeout=60,
                 retry=Retry(max=2, enqueue_at_front=True))
    a, job_a, execution_a, lease_a = _running(connection, queue, "before-flush")
    connection.flushall()
    a._beat_once(job_a, execution_a, lease_a)
    assert lease_a.lost
    # the API's claim retry puts the job back (_never_queued)
    LeanEnqueue().enqueue(queue, func=sleeps, args=(0,), job_id="flushed", timeout=60,
                          retry=Retry(max=2, enqueue_at_front=True))
    b, job_b, execution_b, _ = _started(connection, queue, "after-flush")
    lease_b = b._job_lease(job_b, execution_b)
    assert lease_b.take(60) >= 1
    b._beat_once(job_b, execution_b, lease_b)
    _only_the_holder_writes(connection, holder=lease_b, fenced=lease_a, late=lease_a)


def test_a_takeover_race_two_reruns_one_holder(redis_server) -> None:
    # the holder died; two re-runs (a job held twice and re-queued) try to take it over at once:
    # only one may hold it, and the other waits for it (it lives)
    connection = redis_server.client()
    queue = _queue(connection)
    for _ in range(3):
        queue.enqueue(sleeps, 0, job_id="takeover", retry=Retry(max=1, enqueue_at_front=True))
    _dead, _job, execution, lease = _running(connection, queue, "dead")
    x_lane, x_job, x_exec, _ = _started(connection, queue, "x")
    y_lane, y_job, y_exec, _ = _started(connection, queue, "y")
    x, y = x_lane._job_lease(x_job, x_exec), y_lane._job_lease(y_job, y_exec)
    connection.zrem(queue.started_job_registry.key, execution.composite_key)  # the dead one's entry gone
    outcomes = sorted([x.take(60), y.take(60)])
    assert outcomes[0] == -1 and outcomes[1] >= 2
    winner, loser = (x, y) if x.taken else (y, x)
    _only_the_holder_writes(connection, holder=winner, fenced=loser, late=lease)


# ---------------------------------------------------------------- 3. tokens, prefixes, fallbacks


def test_job_ids_that_prefix_each_other_do_not_share_liveness(redis_server) -> None:
    # RQ refuses ':' in job ids, so the ':' after the id in alive()'s prefix check cannot be
    # spoofed by another job; ids that prefix each other ("p", "p-q") must not share liveness:
    # p's dead lane must not look alive through p-q's live entry, nor p-q's live lane look dead
    connection = redis_server.client()
    queue = _queue(connection)
    queue.enqueue(sleeps, 0, job_id="p")
    queue.enqueue(sleeps, 0, job_id="p-q")
    _lane_p, _job_p, exec_p, lease_p = _running(connection, queue, "lane-p")
    lane_pq, job_pq, exec_pq, lease_pq = _running(connection, queue, "lane-pq")
    assert lease_p.token == "p:" + exec_p.id and lease_pq.token == "p-q:" + exec_pq.id
    connection.zrem(queue.started_job_registry.key, exec_p.composite_key)  # p's lane died
    lane_pq._beat_once(job_pq, exec_pq, lease_pq)
    rerun_p = Lease(connection, "p", new_token("p-q"), 60_000, registry=queue.started_job_registry.key)
    assert rerun_p.take(60) == 2
    newcomer = Lease(connection, "p-q", new_token("p"), 60_000, registry=queue.started_job_registry.key)
    assert newcomer.take(60) == -1
    assert newcomer.publish('{"reward": 0.0}', "t", 60, COUNT) == -1
    assert lease_pq.publish('{"reward": 1.0}', "t", 60, COUNT) == 1


def test_a_non_lane_token_holder_lapses_by_its_ttl(redis_server) -> None:
    # grade_job's fallback token ("job:..."): held while its key lives, then taken over: no forever-wait
    connection = redis_server.client()
    queue = _queue(connection)
    registry = queue.started_job_registry.key
    holder = Lease(connection, "plain", new_token("job"), 1500, registry=registry)
    assert holder.take(60) == 1
    waiter = Lease(connection, "plain", new_token("job"), 1500, registry=registry)
    assert waiter.take(60) == -1
    deadline = time.monotonic() + 5
    while waiter.take(60) == -1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert waiter.taken


def test_a_job_without_deadline_gets_a_lease_key_that_outlives_it_and_is_still_taken_over(redis_server) -> None:
    connection = redis_server.client()
    queue = _queue(connection)
    queue.enqueue(sleeps, 0, job_id="forever", job_timeout=-1, retry=Retry(max=1, enqueue_at_front=True))
    _lane, job, execution, _lease = _running(connection, queue, "no-deadline")
    assert connection.pttl(keys.lease(job.id)) > 86_000_000
    connection.zrem(queue.started_job_registry.key, execution.composite_key)  # died; RQ cleaned up
    other = Lease(connection, job.id, new_token("rerun"), 60_000, registry=queue.started_job_registry.key)
    assert other.take(60) == 2


# ---------------------------------------------------------------- 4. the two-command enqueue vs RQ's paths


def test_a_lean_enqueued_job_abandoned_goes_back_to_the_front_with_its_retries(redis_server) -> None:
    connection = redis_server.client()
    queue = _queue(connection)
    lean = LeanEnqueue()
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="lean-abandoned", timeout=60, result_ttl=0,
                 retry=Retry(max=2, enqueue_at_front=True), meta={"tenant": "t"})
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="lean-behind", timeout=60, result_ttl=0,
                 retry=Retry(max=2, enqueue_at_front=True), meta={"tenant": "t"})
    lane, job, _execution, _lease = _running(connection, queue, "dies")
    time.sleep(lane.get_heartbeat_ttl(job) + 1.5)
    _worker(connection, "cleaner").clean_registries()
    assert queue.get_job_ids() == ["lean-abandoned", "lean-behind"]
    fetched = Job.fetch("lean-abandoned", connection=connection, serializer=JSONSerializer)
    assert fetched.retries_left == 1 and fetched.get_status() == JobStatus.QUEUED
    assert fetched.origin == "contract" and fetched.timeout == 60 and fetched.meta == {"tenant": "t"}
    assert fetched.result_ttl == 0


def test_a_lean_enqueued_job_that_runs_out_of_retries_is_failed_not_lost(redis_server) -> None:
    connection = redis_server.client()
    queue = _queue(connection)
    LeanEnqueue().enqueue(queue, func=sleeps, args=(0,), job_id="lean-out", timeout=60, result_ttl=0,
                          retry=Retry(max=1, enqueue_at_front=True))
    for name in ("one", "two"):
        lane, job, execution, _ = _started(connection, queue, name)
        assert lane._job_lease(job, execution).take(60) >= 1
        time.sleep(lane.get_heartbeat_ttl(job) + 1.5)
        _worker(connection, f"cleaner-{name}").clean_registries()
    fetched = Job.fetch("lean-out", connection=connection, serializer=JSONSerializer)
    assert fetched.get_status() == JobStatus.FAILED
    assert "lean-out" in queue.failed_job_registry.get_job_ids()


# ---------------------------------------------------------------- 5. the token bucket on the caller's clock


def _limiter(server: Any) -> RateLimiter:
    return RateLimiter(aioredis.Redis.from_url(server.url))


@pytest.mark.parametrize("lead", [0.0, 120.0])  # 0.0: the control
def test_a_replica_whose_clock_leads_does_not_lock_a_tenant_out_on_the_others(redis_server, monkeypatch,
                                                                              lead: float) -> None:
    # rate 10/s, burst 2. One request reaches a replica whose clock leads by 120 s; then the
    # tenant asks at 2/s (a fifth of its rate) on the others, waiting out every refusal's wait.
    # Every request after the first couple must be allowed.
    rate, burst = 10.0, 2

    async def run() -> list[float]:
        ahead, right = _limiter(redis_server), _limiter(redis_server)
        try:
            monkeypatch.setattr(ratelimit_module, "time", _SkewedTime(lead))
            assert await ahead.take("lockout", rate, burst) == 0
            monkeypatch.setattr(ratelimit_module, "time", time)
            waits = []
            for _ in range(8):
                await asyncio.sleep(0.5)
                waits.append(await right.take("lockout", rate, burst))
            return waits
        finally:
            await _close([ahead, right])

    waits = asyncio.run(run())
    refused = [w for w in waits if w > 0]
    assert not refused, f"a tenant at a fifth of its rate was refused {len(refused)} of {len(waits)} times: {waits}"


def test_skewed_replicas_do_not_let_a_tenant_exceed_its_rate_over_time(redis_server, monkeypatch) -> None:
    # replicas at -3 s, 0 and +3 s (taking turns, in every order) hammer one bucket for ~3 s
    rate, burst = 20.0, 5
    skews = [-3.0, 0.0, 3.0, 0.0, -3.0, 3.0]

    async def run() -> tuple[int, float]:
        limiter = _limiter(redis_server)
        allowed = 0
        start = time.monotonic()
        try:
            i = 0
            while time.monotonic() - start < 3.0:
                monkeypatch.setattr(ratelimit_module, "time", _SkewedTime(skews[i % len(skews)]))
                i += 1
                if await limiter.take("hammer", rate, burst) == 0:
                    allowed += 1
                await asyncio.sleep(0.002)
            return allowed, time.monotonic() - start
        finally:
            monkeypatch.setattr(ratelimit_module, "time", time)
            assert limiter.redis is not None
            await limiter.redis.aclose()

    allowed, elapsed = asyncio.run(run())
    # the commit's own bound: burst + rate * elapsed, plus the lead (3 s) once
    assert allowed <= burst + rate * (elapsed + 3.0) + 1, (allowed, elapsed)


def test_a_refusal_s_wait_is_enough_on_the_caller_s_own_clock(redis_server) -> None:
    # a tenant that waits the returned time and asks again is allowed (same replica, true clock)
    async def run() -> list[float]:
        limiter = _limiter(redis_server)
        try:
            out = []
            assert await limiter.take("obey", 5.0, 1) == 0
            for _ in range(5):
                wait = await limiter.take("obey", 5.0, 1)
                out.append(wait)
                await asyncio.sleep(wait + 0.01)
                out.append(await limiter.take("obey", 5.0, 1))
            return out
        finally:
            assert limiter.redis is not None
            await limiter.redis.aclose()

    waits = asyncio.run(run())
    assert all(w == 0 for w in waits[1::2]), waits


def test_a_polling_tenant_is_not_locked_out_past_its_bucket_s_life_by_a_far_future_stamp(
        redis_server, monkeypatch) -> None:
    # A replica whose clock is wildly off (a year ahead) serves one request. The bucket's key
    # lives ceil(burst / rate) + 10 = 11 s, rewritten by every request: a tenant that keeps asking
    # (every 0.5 s, at a twentieth of its rate) must be allowed again once that life has passed.
    rate, burst = 10.0, 2

    async def run() -> list[float]:
        ahead, right = _limiter(redis_server), _limiter(redis_server)
        try:
            monkeypatch.setattr(ratelimit_module, "time", _SkewedTime(365 * 86400.0))
            assert await ahead.take("far", rate, burst) == 0
            monkeypatch.setattr(ratelimit_module, "time", time)
            waits = []
            start = time.monotonic()
            while time.monotonic() - start < 13.0:
                waits.append(await right.take("far", rate, burst))
                await asyncio.sleep(0.5)
            return waits
        finally:
            await _close([ahead, right])

    waits = asyncio.run(run())
    assert any(w == 0 for w in waits[-4:]), f"still refused after 13 s at a twentieth of its rate: {waits[-6:]}"

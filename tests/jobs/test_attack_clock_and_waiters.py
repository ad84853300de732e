"""Attacks (by a reviewer who did not write them) on two pieces of 96ac152: the lanes' clock offset
(app.jobs.rq_bookkeeping._registry_now, worker.grading_worker._sync_clock and its users) and the
"expected waiter" of the request that queued a job (app.jobs.result_notices.expect,
app.jobs.redis_jobs.enqueue/view). A failing test shows a bug; a passing one documents what held."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
from rq import Queue, Retry
from rq.job import JobStatus
from rq.serializers import JSONSerializer

import app.jobs.rq_bookkeeping as rq_bookkeeping
import worker.grading_worker as grading_worker
from app.errors import ApiError
from app.jobs import keys
from app.jobs.leases import Lease, new_token
from app.jobs.redis_jobs import RedisJobs
from tests.jobs.test_attack_registry_lease import _SkewedTime
from tests.jobs.test_expected_results import _claimed_and_queued, _publish, _with_jobs, _work
from tests.jobs.test_rq_contract import _running, _worker, sleeps
from tests.support.redis_server import RedisServer
from worker.grading_worker import GradingWorker

pytestmark = pytest.mark.slow  # a Redis server per test


def _queue(connection: Any) -> Queue:
    return Queue("contract", connection=connection, serializer=JSONSerializer)


def _queued(connection: Any, job_id: str) -> Queue:
    """The contract queue with one job on it (re-run once, at the front, if abandoned)."""
    queue = _queue(connection)
    queue.enqueue(sleeps, 0, job_id=job_id, retry=Retry(max=1, enqueue_at_front=True))
    return queue


def _clock(monkeypatch: pytest.MonkeyPatch) -> _SkewedTime:
    """One host clock for the lanes of this process, whose skew a test sets before each lane acts."""
    clock = _SkewedTime(0.0)
    monkeypatch.setattr(rq_bookkeeping, "time", clock)
    monkeypatch.setattr(grading_worker, "time", clock)
    return clock


def _lane(connection: Any, name: str) -> GradingWorker:
    lane = _worker(connection, name, GradingWorker, job_monitoring_interval=1)
    lane.heartbeat_grace = 1  # type: ignore[attr-defined]
    lane.register_birth()  # measures the offset (_sync_clock)
    return lane  # type: ignore[return-value]


# ---------------------------------------------------------------- 1. the clock offset


@pytest.mark.parametrize("stepped", ["cleaner_forward", "runner_backward"])
def test_a_clock_stepped_between_syncs_does_not_take_a_beating_lane_for_dead(redis_server, monkeypatch,
                                                                             stepped: str) -> None:
    # Both lanes measured their offset at birth (0: one host clock, Redis's agrees). Then one
    # host's clock is stepped by 30 s (NTP step, VM resume, an operator's `date -s`), which the
    # lane learns of only at its next sync, up to CLOCK_SYNC_SECONDS (300 s) later.
    connection = redis_server.client()
    clock = _clock(monkeypatch)
    queue = _queued(connection, "stepped")
    runner, job, execution, lease = _running(connection, queue, "runner")
    cleaner = _lane(connection, "cleaner")
    assert abs(runner._clock_offset()) < 0.5 and abs(cleaner._clock_offset()) < 0.5
    for _ in range(3):  # the runner beats on schedule; the cleaner does its maintenance between beats
        clock.skew = -30.0 if stepped == "runner_backward" else 0.0
        runner._beat_once(job, execution, lease)
        runner.heartbeat()  # (a resync would happen here if one were due: it is not)
        clock.skew = 30.0 if stepped == "cleaner_forward" else 0.0
        cleaner.heartbeat()
        cleaner._requeue_abandoned()
        clock.skew = 0.0
        assert not lease.lost, "a lane beating on schedule was taken for dead (its job is re-run beside it)"
        assert job.get_status() == JobStatus.STARTED and queue.get_job_ids() == []
        time.sleep(0.3)


def test_an_offset_measured_through_a_stalled_time_reply_does_not_take_a_beating_lane_for_dead(
        redis_server) -> None:
    # Redis busy for 4.5 s (a slow script, a big DEL, a fork stall) while a lane's TIME waits in
    # its input buffer: TIME runs at the end and answers at once, so the midpoint estimate puts
    # Redis's clock ~2 s ahead of a host whose clock agrees with it exactly.
    connection = redis_server.client()
    queue = _queued(connection, "stalled-time")
    runner, job, execution, lease = _running(connection, queue, "runner")
    cleaner = _lane(connection, "cleaner")
    busy = """
local t0 = redis.call('TIME')
while true do
  local t = redis.call('TIME')
  if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 4500000 then return 1 end
end"""
    stall = threading.Thread(target=lambda: redis_server.client().eval(busy, 0))
    stall.start()
    time.sleep(0.2)
    cleaner._sync_clock()  # as its periodic resync does (heartbeat)
    stall.join()
    measured = cleaner._clock_offset()
    runner._beat_once(job, execution, lease)  # on schedule
    time.sleep(0.5)  # half an interval later
    cleaner._requeue_abandoned()
    assert not lease.lost and job.get_status() == JobStatus.STARTED, (
        f"offset measured {measured:.2f} s (truly 0): the beating lane's job was re-queued")
    assert abs(measured) < 0.5, f"offset measured {measured:.2f} s through a stalled reply (truly 0)"


def test_some_lane_still_runs_rq_s_whole_pass_when_redis_s_clock_disagrees_with_every_host(
        redis_server, monkeypatch) -> None:
    # Redis's host clock 5 s off every worker host's (a managed Redis, its own NTP): every lane
    # finds its clock "off" and skips RQ's whole pass, so no lane ever runs it, and what only it
    # does is never done: a job a lane popped (into RQ's intermediate queue) and died before
    # starting is never re-queued; failed/finished/worker registries are never cleaned.
    connection = redis_server.client()
    clock = _clock(monkeypatch)
    clock.skew = 5.0
    passes: list[str] = []
    monkeypatch.setattr(rq_bookkeeping.LeanBookkeeping, "run_maintenance_tasks",
                        lambda self: passes.append(self.name), raising=False)
    lanes = [_lane(connection, f"lane-{i}") for i in range(3)]
    for _ in range(2):  # two periods of MINUTE_MAINTENANCE_SECONDS each, as if a minute had passed
        for lane in lanes:
            lane._minute_pass_asked_at = float("-inf")
            lane.run_maintenance_tasks()
    assert passes, "no lane runs RQ's whole maintenance pass while Redis's clock is off every host's"


def test_a_lane_whose_clock_leads_by_minutes_keeps_its_job_and_a_dead_one_is_still_requeued(
        redis_server, monkeypatch) -> None:
    # (control) offsets measured at birth, no step: a lane 120 s ahead of Redis beats; a lane
    # on Redis's time cleans; the live job stays, and a dead lane's job is re-queued in time.
    connection = redis_server.client()
    clock = _clock(monkeypatch)
    queue = _queued(connection, "ahead-live")
    clock.skew = 120.0
    runner, job, execution, lease = _running(connection, queue, "ahead")
    clock.skew = 0.0
    cleaner = _lane(connection, "cleaner")
    for _ in range(4):
        clock.skew = 120.0
        runner._beat_once(job, execution, lease)
        clock.skew = 0.0
        cleaner._requeue_abandoned()
        time.sleep(0.5)
    assert not lease.lost and job.get_status() == JobStatus.STARTED
    clock.skew = 120.0  # the ahead lane dies (no more beats)
    time.sleep(runner.get_heartbeat_ttl(job) + 0.5)
    clock.skew = 0.0
    cleaner._requeue_abandoned()
    assert job.get_status() == JobStatus.QUEUED


# ---------------------------------------------------------------- 2. the expected waiter


def test_a_retry_that_queued_first_does_not_leave_the_first_request_waiting_out_a_stored_result(
        redis_server: RedisServer) -> None:
    # _never_queued's own docstring: a first request between its claim and its enqueue can race
    # a retry of the same request id, which queues the job; a worker grades it and writes the
    # result; then the first request queues it again and waits with an expected waiter, which
    # reads nothing first: the result written before its expect was never announced to it. (Fixed:
    # the job it queued again runs, and an attempt that finds the result announces it again.)
    async def run(jobs: RedisJobs) -> Any:
        first = await jobs.claim("t", "raced", "digest")
        retry = await jobs.claim("t", "raced", "digest")
        assert first.new and retry.new and first.job_id == retry.job_id
        await jobs.enqueue("t", retry.job_id, _work())
        await asyncio.to_thread(_publish, redis_server, retry.job_id)  # a worker, fast
        retry_view = await jobs.view("t", retry.job_id, 5)
        await jobs.enqueue("t", first.job_id, _work())  # the first request goes on
        started = time.monotonic()
        view = asyncio.create_task(jobs.view("t", first.job_id, 4))
        await asyncio.sleep(0.3)
        # the job queued a second time is run: its attempt finds the result (and announces it)
        again = Lease(redis_server.client(), first.job_id, new_token("again"), 60_000)
        assert await asyncio.to_thread(again.take, 60) == 0
        view = await view
        return retry_view, view, time.monotonic() - started

    retry_view, view, waited = _with_jobs(redis_server, run)
    assert retry_view.status == "finished"
    assert view.status == "finished", (
        f"the result was stored, yet the request waited {waited:.1f} s and got {view.status}")


def test_two_requests_of_one_request_id_in_one_process_leave_no_waiter_behind(redis_server: RedisServer) -> None:
    # Both enqueue the same job id concurrently (the race above, in one process): enqueue's
    # _expected keeps one waiter per job id, so the first registered waiter is overwritten and
    # never forgotten by anyone (ResultNotices._waiters grows by one per such race, for good).
    async def run(jobs: RedisJobs) -> Any:
        first = await jobs.claim("t", "twice", "digest")
        retry = await jobs.claim("t", "twice", "digest")
        assert first.new and retry.new
        async def request(job_id: str) -> Any:  # as the service does: queue, then wait, in one task
            await jobs.enqueue("t", job_id, _work())
            return await jobs.view("t", job_id, 5)

        views = [asyncio.create_task(request(first.job_id)), asyncio.create_task(request(retry.job_id))]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(_publish, redis_server, first.job_id)
        done = await asyncio.gather(*views)
        return [v.status for v in done], dict(jobs.notices._waiters), dict(jobs._expected)

    statuses, waiters, expected = _with_jobs(redis_server, run)
    assert statuses == ["finished", "finished"]
    assert expected == {} and waiters == {}, f"left behind: {waiters}"


@pytest.mark.parametrize("failure", ["redis_error", "cancelled"])
def test_an_enqueue_that_fails_after_expect_leaves_no_waiter(redis_server: RedisServer, monkeypatch,
                                                             failure: str) -> None:
    async def run(jobs: RedisJobs) -> Any:
        claim = await jobs.claim("t", "fails", "digest")

        def broken(*_: Any) -> None:
            if failure == "cancelled":
                time.sleep(0.5)
                return
            raise redis.ConnectionError("cut")

        monkeypatch.setattr(jobs, "_enqueue", broken)
        task = asyncio.create_task(jobs.enqueue("t", claim.job_id, _work()))
        if failure == "cancelled":
            await asyncio.sleep(0.1)
            task.cancel()
        with pytest.raises((redis.ConnectionError, asyncio.CancelledError, Exception)):
            await task
        await asyncio.sleep(0.6)
        return dict(jobs.notices._waiters), dict(jobs._expected)

    waiters, expected = _with_jobs(redis_server, run)
    assert waiters == {} and expected == {}


def test_an_announced_result_survives_a_resubscription_before_the_wait(redis_server: RedisServer) -> None:
    # announced to the expected waiter, then the subscription comes back (redis-py's silent
    # resubscribe: _wake_all overwrites the waiter's result with None) before view starts
    async def run(jobs: RedisJobs) -> Any:
        job_id = await _claimed_and_queued(jobs, "t", "overwritten")
        await asyncio.to_thread(_publish, redis_server, job_id)
        await asyncio.sleep(0.3)
        jobs.notices._wake_all()
        started = time.monotonic()
        view = await jobs.view("t", job_id, 5)
        return view, time.monotonic() - started

    view, waited = _with_jobs(redis_server, run)
    assert view.status == "finished" and waited < 1.0


def test_a_listener_killed_between_expect_and_the_announcement_still_delivers(redis_server: RedisServer) -> None:
    # the listener's connection is killed by Redis (CLIENT KILL TYPE pubsub) after expect; the
    # result is written and announced while it is down; the wait must still get it promptly
    async def run(jobs: RedisJobs) -> Any:
        job_id = await _claimed_and_queued(jobs, "t", "killed")
        admin = redis_server.client()
        admin.client_kill_filter(_type="pubsub")
        await asyncio.to_thread(_publish, redis_server, job_id)
        started = time.monotonic()
        view = await jobs.view("t", job_id, 8)
        return view, time.monotonic() - started, dict(jobs.notices._waiters)

    view, waited, waiters = _with_jobs(redis_server, run)
    assert view.status == "finished", f"waited {waited:.1f} s"
    assert waiters == {}


def test_a_view_with_wait_zero_after_the_announcement_returns_the_result(redis_server: RedisServer) -> None:
    async def run(jobs: RedisJobs) -> Any:
        pending_id = await _claimed_and_queued(jobs, "t", "zero-pending")
        pending = await jobs.view("t", pending_id, 0)
        job_id = await _claimed_and_queued(jobs, "t", "zero-done")
        await asyncio.to_thread(_publish, redis_server, job_id)
        await asyncio.sleep(0.3)
        return pending, await jobs.view("t", job_id, 0), dict(jobs.notices._waiters), dict(jobs._expected)

    pending, done, waiters, expected = _with_jobs(redis_server, run)
    assert pending.status == "queued" and done.status == "finished"
    assert waiters == {} and expected == {}


def test_poll_mode_registers_no_waiter_and_still_finds_the_result(redis_server: RedisServer) -> None:
    async def run(jobs: RedisJobs) -> Any:
        job_id = await _claimed_and_queued(jobs, "t", "polled")
        expected = dict(jobs._expected)
        redis_server.client().set(keys.result(job_id), _result_json(), ex=60)
        return expected, await jobs.view("t", job_id, 5)

    expected, view = _with_jobs(redis_server, run, result_wait="poll")
    assert expected == {} and view.status == "finished"


def _result_json() -> str:
    from tests.jobs.test_expected_results import RESULT
    return RESULT


def test_a_view_that_takes_the_expected_waiter_while_the_enqueue_fails_does_not_report_queued(
        redis_server: RedisServer, monkeypatch) -> None:
    # Another request of the tenant (GET /jobs/{id}, or the retry's view) calls view while the
    # enqueue is in its thread: it pops the expected waiter and reads nothing. The enqueue then
    # fails (Redis error): its _unexpect finds no waiter and its _forget deletes the claim. The
    # view waits out its whole wait for a job that was never queued and answers "queued" (a
    # first read would have found no owner: the 410 of a lost job, or a 404).
    async def run(jobs: RedisJobs) -> Any:
        claim = await jobs.claim("t", "popped", "digest")

        def slow_then_cut(*_: Any) -> None:
            time.sleep(0.5)
            raise redis.ConnectionError("cut")

        monkeypatch.setattr(jobs, "_enqueue", slow_then_cut)
        enqueue = asyncio.create_task(jobs.enqueue("t", claim.job_id, _work()))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        view = asyncio.create_task(jobs.view("t", claim.job_id, 3))
        with pytest.raises(Exception):  # noqa: B017  (QueueUnavailable)
            await enqueue
        owner = redis_server.client().get(keys.owner(claim.job_id))
        first = await view
        try:
            later = await jobs.view("t", claim.job_id, 0)
        except ApiError as error:
            later = error.error
        return first, later, time.monotonic() - started, owner, dict(jobs.notices._waiters)

    # (Fixed: the waiter is the queueing request's own, kept in its task's context: another
    # request's view reads first, as for any job. A view whose first read came before the enqueue
    # failed still answers "queued" when its wait ends, as it did before the waiter existed; the
    # next one says the job is lost.)
    first, later, _, owner, waiters = _with_jobs(redis_server, run)
    assert owner is None  # the claim is gone: this job will never run
    assert waiters == {}
    assert first is None or first.status in ("queued", "started")
    assert later in (None, "job_lost")


def test_rq_s_whole_pass_on_a_lane_just_inside_half_the_grace_leaves_a_lane_beating_on_time(
        redis_server, monkeypatch) -> None:
    # RQ's whole pass cleans the StartedJobRegistry with its own current_timestamp() (the host's
    # clock, whole seconds). A lane whose clock leads Redis's by just under grace/2 runs it just
    # before a lane beating on time beats again: the beating lane must stay.
    import rq.registry
    connection = redis_server.client()
    clock = _clock(monkeypatch)
    queue = _queued(connection, "half-grace")
    runner, job, execution, lease = _running(connection, queue, "runner")
    clock.skew = 0.45  # grace 1: within half
    cleaner = _lane(connection, "cleaner")
    assert cleaner._clock_agrees()
    monkeypatch.setattr(rq.registry, "current_timestamp", lambda: int(time.time() + 0.45))
    for _ in range(3):
        clock.skew = 0.0
        runner._beat_once(job, execution, lease)
        time.sleep(0.95)  # just before its next beat
        clock.skew = 0.45
        connection.delete(keys.MINUTE_MAINTENANCE)
        cleaner._minute_pass_asked_at = float("-inf")
        cleaner.run_maintenance_tasks()
        clock.skew = 0.0
        assert job.get_status() == JobStatus.STARTED and queue.get_job_ids() == []
    assert not lease.lost

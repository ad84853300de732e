"""On a real Redis: the wait of the request that queued a job (app.jobs.redis_jobs, enqueue then
view) registers for the result's announcement before the job is queued, and so reads nothing
first (app.jobs.result_notices.expect). What must still hold: a result announced before the wait
starts is returned; a subscription that went down or came back in between falls back to a read;
another tenant's view of the id is not served from that waiter; a caller that queues without
waiting leaves a bounded number of waiters behind."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from app.graders.result import GradeResult, Outcome
from app.jobs import keys, redis_jobs
from app.jobs.base import QueuedGrading
from app.jobs.redis_jobs import RedisJobs
from app.settings import Settings
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis server per test

T = TypeVar("T")
RESULT = GradeResult(grading="numeric", outcome=Outcome.correct, reward=1.0, explanation="right").model_dump_json()


def _work() -> QueuedGrading:
    def never() -> Any:
        raise AssertionError("not run in the API")
    return QueuedGrading(queue="impl", run=never, payload=lambda: {"request": {}, "tenant": "t"})


def _calls(connection: Any) -> dict[str, int]:
    stats = connection.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    calls.pop("config|resetstat", None)
    return calls


def _publish(server: RedisServer, job_id: str) -> None:
    """What a worker's publish does: the result, then its announcement."""
    connection = server.client()
    connection.set(keys.result(job_id), RESULT, ex=60)
    connection.publish(keys.RESULTS_CHANNEL, job_id.encode() + b"\n" + RESULT.encode())


def _with_jobs(redis_server: RedisServer, scenario: Callable[[RedisJobs], Awaitable[T]], **queue: Any) -> T:
    """``scenario`` run with the API's job store on this Redis (``queue``: its queue settings),
    closed afterwards."""
    async def run() -> T:
        settings = Settings(redis_url=redis_server.url)
        for name, value in queue.items():
            setattr(settings.queue, name, value)
        jobs = RedisJobs(settings, print)
        try:
            return await scenario(jobs)
        finally:
            await jobs.close()

    return asyncio.run(run())


async def _claimed_and_queued(jobs: RedisJobs, tenant: str, request_id: str) -> str:
    claim = await jobs.claim(tenant, request_id, "digest")
    await jobs.enqueue(tenant, claim.job_id, _work())
    return claim.job_id


def test_the_wait_of_the_request_that_queued_the_job_reads_nothing_first(redis_server: RedisServer) -> None:
    connection = redis_server.client()

    async def run(jobs: RedisJobs) -> Any:
        job_id = await _claimed_and_queued(jobs, "t", "fresh")
        connection.config_resetstat()
        view = asyncio.create_task(jobs.view("t", job_id, 10))
        await asyncio.sleep(0.3)
        reads = {k: v for k, v in _calls(connection).items() if k in ("get", "mget")}
        await asyncio.to_thread(_publish, redis_server, job_id)
        return reads, await view, jobs.notices._waiters

    reads, view, waiters = _with_jobs(redis_server, run)
    assert reads == {}, reads  # the owner and the result were not read
    assert view.status == "finished" and view.result.reward == 1.0
    assert waiters == {}


def test_a_result_announced_before_the_wait_starts_is_returned_without_a_read(redis_server: RedisServer) -> None:
    connection = redis_server.client()

    async def run(jobs: RedisJobs) -> Any:
        job_id = await _claimed_and_queued(jobs, "t", "quick")
        await asyncio.to_thread(_publish, redis_server, job_id)  # a worker faster than the request
        await asyncio.sleep(0.3)  # the announcement reaches the waiter
        connection.config_resetstat()
        return await jobs.view("t", job_id, 10), _calls(connection)

    view, calls = _with_jobs(redis_server, run)
    assert view.status == "finished" and view.result.reward == 1.0
    assert "get" not in calls and "mget" not in calls and "hget" not in calls, calls


def test_a_subscription_that_came_back_in_between_falls_back_to_a_read(redis_server: RedisServer) -> None:
    # the result was written while the waiter could have missed its announcement: every way the
    # subscription comes back wakes the waiters without a result, and this one then reads
    async def run(jobs: RedisJobs) -> Any:
        job_id = await _claimed_and_queued(jobs, "t", "missed")
        redis_server.client().set(keys.result(job_id), RESULT, ex=60)  # written, never announced
        jobs.notices._wake_all()  # as a resubscription does
        return await asyncio.wait_for(jobs.view("t", job_id, 30), 10)

    view = _with_jobs(redis_server, run)
    assert view.status == "finished" and view.result.reward == 1.0


def test_another_tenant_s_view_of_the_id_is_not_served_from_the_waiter(redis_server: RedisServer) -> None:
    async def run(jobs: RedisJobs) -> Any:
        job_id = await _claimed_and_queued(jobs, "owner", "theirs")
        await asyncio.to_thread(_publish, redis_server, job_id)
        await asyncio.sleep(0.3)
        intruder = await jobs.view("intruder", job_id, 1)
        owner = await jobs.view("owner", job_id, 1)  # the request that queued it
        return intruder, owner, jobs.notices._waiters, jobs._expected

    intruder, owner, waiters, expected = _with_jobs(redis_server, run)
    assert intruder is None  # not the intruder's: as for any other job
    assert owner.status == "finished"
    assert waiters == {} and expected == {}


def test_queueing_without_waiting_leaves_a_bounded_number_of_waiters(redis_server: RedisServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_jobs, "EXPECTED_MEMORY", 3)

    async def run(jobs: RedisJobs) -> tuple[int, int, str]:
        # ten requests, each in its own task, that queue a job and never wait for it
        ids = [await asyncio.create_task(_claimed_and_queued(jobs, "t", f"unwaited-{i}")) for i in range(10)]
        left = sum(len(w) for w in jobs.notices._waiters.values())
        # a view of the oldest, whose waiter was forgotten, reads first
        await asyncio.to_thread(_publish, redis_server, ids[0])
        view = await jobs.view("t", ids[0], 5)
        return left, len(jobs._expected), view.status

    left, expected, status = _with_jobs(redis_server, run)
    assert left == expected == 3
    assert status == "finished"

"""On a real Redis: a batch's in-flight slots are reserved whole or not at all (the Lua script
the API replicas share), a refused reservation forgets its claims, and the workers' grade counts
keep each tenant's own window beside the deployment's."""

from __future__ import annotations

import asyncio

import pytest

from app.errors import ApiError
from app.jobs import grade_log, keys
from app.jobs.redis_jobs import RedisJobs
from app.settings import Settings
from tests.support.grade_counts import window_totals
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis server per test


def test_reservations_are_all_or_nothing_across_replicas(redis_server: RedisServer) -> None:
    settings = Settings(redis_url=redis_server.url)

    async def run() -> None:
        one, two = RedisJobs(settings, print), RedisJobs(settings, print)  # two API replicas
        try:
            three = [await one.claim("t", f"r{i}", "d") for i in range(3)]
            with pytest.raises(ApiError) as refused:
                await one.reserve("t", [c.job_id for c in three], 2)
            assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
            connection = redis_server.client()
            assert connection.zcard(keys.in_flight("t")) == 0
            assert not any(connection.exists(keys.owner(c.job_id)) for c in three)  # forgotten
            # racing replicas: together they never hold more than the cap
            claims = [await r.claim("t", None, "d") for r in (one, two) for _ in range(2)]
            outcomes = await asyncio.gather(
                one.reserve("t", [c.job_id for c in claims[:2]], 3),
                two.reserve("t", [c.job_id for c in claims[2:]], 3), return_exceptions=True)
            assert sorted(type(o).__name__ for o in outcomes) == ["ApiError", "NoneType"]
            assert connection.zcard(keys.in_flight("t")) == 2
            await one.release("t", claims[0].job_id)
            assert connection.zcard(keys.in_flight("t")) <= 2
        finally:
            await one.close()
            await two.close()

    asyncio.run(run())


def test_a_tenants_window_holds_its_own_grades_only(redis_server: RedisServer) -> None:
    connection = redis_server.client()
    with connection.pipeline() as pipe:
        for tenant, outcome in (("a", "correct"), ("a", "judge_error"), ("b", "incorrect"), (None, "correct")):
            grade_log.count_grade(pipe, "exam", "judge", outcome, tenant=tenant)
        pipe.execute()

    assert window_totals(grade_log.window(connection)) == {("exam", "correct"): 2, ("exam", "judge_error"): 1,
                                                           ("exam", "incorrect"): 1}
    assert window_totals(grade_log.window(connection, tenant="a")) == {("exam", "correct"): 1,
                                                                       ("exam", "judge_error"): 1}
    assert window_totals(grade_log.window(connection, tenant="b")) == {("exam", "incorrect"): 1}
    assert [f["kind"] for f in grade_log.faults(connection, "a")] == ["judge_error"]
    assert grade_log.faults(connection, "b") == []

"""Embedded jobs keep their records in memory: bounded by count (oldest finished first) and by
time, so fresh idempotency keys sent forever cannot grow the process; and a batch's in-flight
slots are reserved whole or not at all."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.errors import ApiError
from app.graders.result import GradeResult, Outcome
from app.jobs.base import QueuedGrading
from app.jobs.embedded import EmbeddedJobs
from app.settings import QueueSettings, Settings


def result() -> GradeResult:
    return GradeResult(grading="numeric", outcome=Outcome.correct, reward=1.0, explanation="right")


def jobs(**queue: object) -> EmbeddedJobs:
    return EmbeddedJobs(Settings(queue=QueueSettings(**queue)))


def test_fresh_keys_forever_keep_at_most_the_bound() -> None:
    store = jobs(max_kept_jobs=50)

    async def run() -> None:
        for i in range(2000):
            claim = await store.claim("t", f"key-{i}", "digest")
            await store.store("t", claim.job_id, result())
            assert len(store._jobs) <= 51  # the bound, plus the claim being made

    asyncio.run(run())


def test_the_newest_results_are_the_ones_kept() -> None:
    store = jobs(max_kept_jobs=10)

    async def run() -> list[bool]:
        ids = []
        for i in range(30):
            claim = await store.claim("t", f"key-{i}", "digest")
            await store.store("t", claim.job_id, result())
            ids.append(claim.job_id)
        return [await store.view("t", job_id, 0) is not None for job_id in ids]

    kept = asyncio.run(run())
    assert kept[-10:] == [True] * 10 and not any(kept[:19])


def test_records_past_their_ttl_go_even_under_the_count_bound() -> None:
    store = jobs(max_kept_jobs=1000, result_ttl=60)

    async def run() -> int:
        old = await store.claim("t", "old", "digest")
        await store.store("t", old.job_id, result())
        store._jobs[old.job_id].created -= 61  # as if a minute had passed
        await store.claim("t", "new", "digest")
        return len(store._jobs)

    assert asyncio.run(run()) == 1


def test_unfinished_jobs_are_never_evicted() -> None:
    store = jobs(max_kept_jobs=5)
    release = threading.Event()

    def slow() -> GradeResult:
        release.wait(30)
        return result()

    work = QueuedGrading(queue="judge", run=slow, payload=dict)

    async def run() -> bool:
        first = await store.claim("t", "running", "digest")
        await store.enqueue("t", first.job_id, work)
        for i in range(50):
            claim = await store.claim("t", f"key-{i}", "digest")
            await store.store("t", claim.job_id, result())
        alive = first.job_id in store._jobs
        release.set()
        return alive

    try:
        assert asyncio.run(run())
    finally:
        release.set()
        asyncio.run(store.close())


def test_a_batch_over_the_in_flight_cap_reserves_nothing() -> None:
    store = jobs()

    async def run() -> None:
        claims = [await store.claim("t", None, "d") for _ in range(3)]
        with pytest.raises(ApiError) as refused:
            await store.reserve("t", [c.job_id for c in claims], 2)
        assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
        assert all(c.job_id not in store._jobs for c in claims)  # forgotten: a retry is new
        two = [await store.claim("t", None, "d") for _ in range(2)]
        await store.reserve("t", [c.job_id for c in two], 2)  # the refused three took no slot
        late = await store.claim("t", None, "d")
        with pytest.raises(ApiError):
            await store.reserve("t", [late.job_id], 2)  # the two hold both slots

    asyncio.run(run())


def test_another_tenants_fresh_keys_do_not_evict_my_records() -> None:
    store = jobs(max_kept_jobs=10)

    async def run() -> bool:
        mine = await store.claim("bob", "step-1", "digest")
        await store.store("bob", mine.job_id, result())
        for i in range(500):  # fifty times the bound, from another tenant
            claim = await store.claim("mallory", f"m-{i}", "digest")
            await store.store("mallory", claim.job_id, result())
        assert len(store._of_tenant["mallory"]) <= 11
        return await store.view("bob", mine.job_id, 0) is not None

    assert asyncio.run(run())


def big_result(i: int) -> GradeResult:
    # evidence that does not compress away: distinct numbers row by row
    rows = [{"row": n, "got": f"{(n * 7919 + i) % 100003:x}", "want": f"{(n * 104729) ^ i:x}"} for n in range(2000)]
    return GradeResult(grading="rows", outcome=Outcome.incorrect, reward=0.0, explanation="wrong",
                       details={"rows": rows})


def test_stored_bytes_stay_under_the_tenant_and_total_bounds() -> None:
    store = jobs(max_kept_bytes_per_tenant=200_000, max_kept_bytes=300_000)

    async def run() -> None:
        for i in range(60):
            for tenant in ("a", "b", "c"):
                claim = await store.claim(tenant, f"{tenant}-{i}", "digest")
                await store.store(tenant, claim.job_id, big_result(i))
                packed = len(store._jobs[claim.job_id].packed or b"")
                assert packed > 10_000  # the bound is tested against results of real size
                # each bound, plus the one record stored since the last claim trimmed
                assert store._bytes[tenant] <= 200_000 + packed
                assert store._total_bytes <= 300_000 + packed
        assert store._total_bytes == sum(len(j.packed or b"") for j in store._jobs.values())
        newest = await store.view("c", store._jobs[next(reversed(store._jobs))].job_id, 0)
        assert newest is not None and newest.result is not None and newest.result.details["rows"][5]["row"] == 5

    asyncio.run(run())

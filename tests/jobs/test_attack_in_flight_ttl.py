"""Attack (fresh reviewer): the per-tenant in-flight cap (app/jobs/redis_jobs.py ``_RESERVE``) now gives
the tenant's sorted set its TTL only when the reservation makes it (held == 0), not on every
reservation. Attacks: pass max_in_flight, or leave a set without a TTL -- at the set's expiry while
the tenant stays busy, after a release or a prune empties it, after a Redis restart (AOF) or a
flush, with two API replicas racing, and for a set that has no TTL to begin with. Real Redis."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from app.errors import ApiError
from app.jobs import keys, redis_jobs
from app.jobs.leases import Lease, new_token
from app.jobs.redis_jobs import RedisJobs
from app.settings import Settings
from tests.jobs.test_expected_results import _work
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis server per test

TENANT = "t"


def _settings(server: RedisServer, job_timeout: int = 600) -> Settings:
    return Settings(redis_url=server.url, queue={"job_timeout": job_timeout, "retries": 0})


async def _queued(jobs: RedisJobs, request_id: str, cap: int) -> str:
    """A job of the tenant's, claimed and queued under an in-flight cap of ``cap``: its id."""
    claim = await jobs.claim(TENANT, request_id, "digest")
    await jobs.enqueue(TENANT, claim.job_id, _work(), max_in_flight=cap)
    return claim.job_id


async def _refused(jobs: RedisJobs, ids: list[str], cap: int) -> bool:
    try:
        await jobs.reserve(TENANT, ids, cap)
    except ApiError as exc:
        assert exc.status == 429, exc
        return True
    return False


def test_the_cap_holds_when_the_set_of_a_busy_tenant_reaches_its_ttl(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The set's TTL (seven days; 2 s here) counts from the reservation that made it. A tenant
    that never empties its set -- any trainer grading around the clock, or an attacker keeping one
    job queued -- has it expire under jobs that are still in flight; the next reservations then
    start from zero, and the tenant holds up to twice its cap (more if it keeps it up). Scaled
    down in time only: cap 2, jobs that can run for 10 minutes, a TTL of 2 s."""
    monkeypatch.setattr(redis_jobs, "QUEUED_RECORD_TTL", 2)
    cap = 2

    async def run() -> None:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            began = time.monotonic()
            await jobs.reserve(TENANT, ["a"], cap)  # makes the set
            await asyncio.sleep(1.2)
            await jobs.reserve(TENANT, ["b"], cap)  # at the cap
            await jobs.release(TENANT, "a")  # a finished
            await jobs.reserve(TENANT, ["c"], cap)  # b and c in flight: at the cap, never empty
            assert await _refused(jobs, ["x"], cap)
            await asyncio.sleep(max(0.0, 2.5 - (time.monotonic() - began)))  # past the made set's TTL
            # b and c were reserved 1.3 s ago and run for up to 10 minutes: still in flight
            assert await _refused(jobs, ["d"], cap), "the cap was passed: the busy set expired under its jobs"
        finally:
            await jobs.close()

    asyncio.run(run())


def test_a_set_without_a_ttl_gets_one_while_it_is_in_use(redis_server: RedisServer) -> None:
    """A set with no TTL (left by an earlier release that set it with ZADD then EXPIRE as two
    commands and died between them, by a restore, by hand) is no longer given one by a reservation
    while it holds an entry: a tenant that keeps one job in flight keeps it forever, and a tenant
    that leaves mid-job leaves it behind. Hardening rather than an attack a tenant can start."""
    connection = redis_server.client()
    key = keys.in_flight(TENANT)
    connection.zadd(key, {"left": time.time()})
    assert connection.ttl(key) == -1

    async def run() -> None:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            await jobs.reserve(TENANT, ["a"], 5)
            assert connection.ttl(key) > 0, "a set in use stays without a TTL"
        finally:
            await jobs.close()

    asyncio.run(run())


def test_a_set_emptied_by_release_publish_or_prune_is_made_again_with_a_ttl(redis_server: RedisServer) -> None:
    connection = redis_server.client()
    key = keys.in_flight(TENANT)

    async def run() -> None:
        jobs = RedisJobs(_settings(redis_server, job_timeout=1), print)  # entries stale after 1 s
        try:
            # emptied by the prune: every entry stale, the set goes within the script and the
            # reservation makes it again
            await jobs.reserve(TENANT, ["a", "b"], 2)
            await asyncio.sleep(1.2)
            await jobs.reserve(TENANT, ["c", "d"], 2)
            assert connection.zrange(key, 0, -1) == [b"c", b"d"] and connection.ttl(key) > 0
            # emptied by a worker's result write (its script's ZREM) and the API's release
            lease = Lease(connection, "c", new_token("s36"), 10_000)
            assert lease.take(60) == 1
            assert lease.publish("{}", TENANT, 60, _count()) == 1
            await jobs.release(TENANT, "d")
            assert not connection.exists(key)
            await jobs.reserve(TENANT, ["e"], 2)
            assert connection.ttl(key) > 0
            # a stale entry pruned beside a live one: the set keeps the TTL it was made with
            await asyncio.sleep(1.2)
            await jobs.reserve(TENANT, ["f"], 2)  # held 1 + 1: no prune needed, no TTL change
            await jobs.reserve(TENANT, ["g"], 2)  # prunes e, f is live
            assert connection.zrange(key, 0, -1) == [b"f", b"g"] and connection.ttl(key) > 0
        finally:
            await jobs.close()

    asyncio.run(run())


def _count():
    from app.jobs.grade_log import grade_count

    return grade_count("exam", "judge", "correct", tenant=TENANT)


def test_a_restart_or_a_flush_leaves_no_set_without_a_ttl(redis_server: RedisServer) -> None:
    connection = redis_server.client()
    key = keys.in_flight(TENANT)

    async def run(ids: list[str]) -> None:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            await jobs.reserve(TENANT, ids, 5)
        finally:
            await jobs.close()

    asyncio.run(run(["a", "b"]))
    redis_server.stop()
    redis_server.start()  # the AOF read back: the set and its TTL
    connection = redis_server.client()
    assert connection.zcard(key) == 2 and connection.ttl(key) > 0
    asyncio.run(run(["c"]))
    assert connection.zcard(key) == 3 and connection.ttl(key) > 0
    connection.flushall()
    asyncio.run(run(["d"]))
    assert connection.zcard(key) == 1 and connection.ttl(key) > 0


def test_racing_replicas_never_pass_the_cap_nor_leave_a_set_without_a_ttl(redis_server: RedisServer) -> None:
    """Three API replicas (clients of their own) reserve and release for one tenant at once, the
    set emptied and made again many times: the set never holds more than the cap and never exists
    without a TTL."""
    connection = redis_server.client()
    key = keys.in_flight(TENANT)
    cap, rounds = 6, 120
    seen: list[tuple[int, int]] = []

    async def replica(n: int) -> None:
        jobs = RedisJobs(_settings(redis_server), print)
        rng = random.Random(n)
        mine: list[str] = []
        try:
            for i in range(rounds):
                batch = [f"{n}-{i}-{k}" for k in range(rng.randint(1, 3))]
                if not await _refused(jobs, batch, cap):
                    mine += batch
                seen.append((connection.zcard(key), connection.ttl(key)))
                everything = rng.random() < 0.7
                while mine and (everything or len(mine) > 2):
                    await jobs.release(TENANT, mine.pop(rng.randrange(len(mine))))
                    seen.append((connection.zcard(key), connection.ttl(key)))
            for job_id in mine:
                await jobs.release(TENANT, job_id)
        finally:
            await jobs.close()

    async def run() -> None:
        await asyncio.gather(*(replica(n) for n in range(3)))

    asyncio.run(run())
    assert seen and max(n for n, _ in seen) <= cap
    assert all(ttl != -1 for _, ttl in seen), "a set existed without a TTL"
    assert any(n == 0 for n, _ in seen) and any(n > 0 for n, _ in seen)  # emptied and made again
    assert not connection.exists(key)  # every job released: nothing left behind


def test_a_backlog_older_than_the_horizon_keeps_the_tenants_cap(redis_server: RedisServer) -> None:
    """Attack (reviewer): an entry older than a job's deadline was pruned as a job that can no
    longer be running, but a job can wait in the queue for longer than that: a tenant whose backlog
    was older than the horizon had its entries pruned at the cap and could queue past it, as many
    as it liked. Only a job that RQ no longer holds as queued or started frees its slot."""
    connection = redis_server.client()
    key = keys.in_flight(TENANT)

    async def run() -> None:
        jobs = RedisJobs(_settings(redis_server, job_timeout=1), print)  # entries past the horizon after 1 s
        try:
            queued = [await _queued(jobs, request_id, 2) for request_id in ("a", "b")]
            await asyncio.sleep(1.2)  # both wait, no worker: older than the horizon
            looked_at = time.time()
            assert await _refused(jobs, ["c"], 2), "a waiting backlog older than the horizon lost its slots"
            assert sorted(m.decode() for m in connection.zrange(key, 0, -1)) == sorted(queued)
            # each waiting entry was looked at once: it now counts from that look
            assert all(connection.zscore(key, job_id) >= looked_at - 1 for job_id in queued)
            assert await _refused(jobs, ["c"], 2)
            # one job was taken from its queue and failed (RQ keeps its record, as failed), the other's
            # record is gone (Redis lost it, or it expired): past the horizon both free their slots
            connection.lrem("rq:queue:impl", 0, queued[0])
            connection.hset(f"rq:job:{queued[0]}", "status", "failed")
            connection.delete(f"rq:job:{queued[1]}")
            await asyncio.sleep(1.2)
            await jobs.reserve(TENANT, ["c", "d"], 2)
            assert sorted(m.decode() for m in connection.zrange(key, 0, -1)) == ["c", "d"]
        finally:
            await jobs.close()

    asyncio.run(run())

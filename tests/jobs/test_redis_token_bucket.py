"""On a real Redis: the tenants' token buckets the API replicas share (app.ratelimit). The
in-memory bucket, which a replica falls back to while Redis is away, is the oracle: the same
sequence of requests is allowed and refused alike by both, with the same waits. What the Redis
bucket adds is checked on its own: one budget across replicas, all of a cost or none, and what a
request costs Redis (every request a tenant makes pays it)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from app.ratelimit import MemoryBuckets, RateLimiter
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis server per test


def _limiters(server: RedisServer, n: int) -> list[RateLimiter]:
    return [RateLimiter(aioredis.Redis.from_url(server.url)) for _ in range(n)]


async def _close(limiters: list[RateLimiter]) -> None:
    for limiter in limiters:
        assert limiter.redis is not None
        await limiter.redis.aclose()


def test_allows_and_refuses_as_the_in_memory_bucket_does(redis_server: RedisServer) -> None:
    # a slow rate, so that the few milliseconds between the two buckets' clocks refill nothing
    # that changes a decision; costs that empty the bucket, then one that cannot be paid
    rate, burst, costs = 0.01, 10, [1, 3, 4, 1, 2, 5, 1]

    async def run() -> list[float]:
        [limiter] = _limiters(redis_server, 1)
        try:
            return [await limiter.take("oracle", rate, burst, cost) for cost in costs]
        finally:
            await _close([limiter])

    got = asyncio.run(run())
    memory = MemoryBuckets()
    expected = [memory.take("oracle", rate, burst, cost) for cost in costs]
    assert [w == 0 for w in got] == [w == 0 for w in expected]
    assert any(w > 0 for w in got)  # the sequence does reach the limit
    for g, e in zip(got, expected, strict=True):
        assert g == pytest.approx(e, rel=0.01)


def test_refills_at_the_rate(redis_server: RedisServer) -> None:
    async def run() -> tuple[float, float]:
        [limiter] = _limiters(redis_server, 1)
        try:
            assert await limiter.take("refill", 20.0, 2, 2) == 0  # empties the bucket
            refused = await limiter.take("refill", 20.0, 2, 2)
            await asyncio.sleep(0.15)  # three tokens' worth at 20/s, capped at the burst of 2
            return refused, await limiter.take("refill", 20.0, 2, 2)
        finally:
            await _close([limiter])

    refused, later = asyncio.run(run())
    assert 0 < refused <= 2 / 20.0
    assert later == 0


def test_replicas_share_one_budget_and_a_refused_cost_takes_nothing(redis_server: RedisServer) -> None:
    async def run() -> None:
        limiters = _limiters(redis_server, 3)
        try:
            outcomes = await asyncio.gather(*(limiters[i % 3].take("shared", 0.001, 12) for i in range(30)))
            assert sum(1 for w in outcomes if w == 0) == 12  # the burst, whichever replica asked
            # a fresh bucket of 5: a cost of 4, then a refused 3, then 1 still there
            one, two, _ = limiters
            assert await one.take("whole", 0.001, 5, 4) == 0
            assert await two.take("whole", 0.001, 5, 3) > 0
            assert await one.take("whole", 0.001, 5, 1) == 0
            assert await two.take("whole", 0.001, 5, 1) > 0
        finally:
            await _close(limiters)

    asyncio.run(run())


def test_a_request_costs_redis_four_commands_and_the_bucket_expires(redis_server: RedisServer) -> None:
    connection = redis_server.client()

    async def run() -> None:
        [limiter] = _limiters(redis_server, 1)
        try:
            await limiter.take("warm", 5.0, 10)  # loads the script
            connection.config_resetstat()
            for _ in range(10):
                await limiter.take("counted", 5.0, 10)
        finally:
            await _close([limiter])

    asyncio.run(run())
    stats = connection.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    calls.pop("config|resetstat", None)
    calls.pop("info", None)
    assert sum(calls.values()) == 40, calls
    bucket = next(k for k in connection.keys("*") if b"counted" in k)
    assert 0 < connection.ttl(bucket) <= 10 / 5.0 + 10  # refilled in 2 s; kept a little longer


def test_falls_back_to_its_own_bucket_while_redis_is_away() -> None:
    async def run() -> list[float]:
        # nothing listens on this port: every call fails to connect
        limiter = RateLimiter(aioredis.Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.5))
        try:
            return [await limiter.take("away", 0.001, 3) for _ in range(4)]
        finally:
            assert limiter.redis is not None
            await limiter.redis.aclose()

    waits = asyncio.run(run())
    assert [w == 0 for w in waits] == [True, True, True, False]


def test_a_local_bucket_costs_redis_nothing_and_stands_apart(redis_server: RedisServer) -> None:
    # reads are limited per API process (app.api.auth): no command, and the shared bucket of the
    # same name is untouched by them
    connection = redis_server.client()

    async def run() -> tuple[list[float], list[float]]:
        [limiter] = _limiters(redis_server, 1)
        try:
            await limiter.take("warm", 5.0, 10)
            connection.config_resetstat()
            local = [await limiter.take("apart", 0.001, 2, shared=False) for _ in range(3)]
            stats = connection.info("commandstats")
            assert set(stats) <= {"cmdstat_config|resetstat", "cmdstat_info"}, stats
            return local, [await limiter.take("apart", 0.001, 2) for _ in range(3)]
        finally:
            await _close([limiter])

    local, shared = asyncio.run(run())
    assert [w == 0 for w in local] == [True, True, False]
    assert [w == 0 for w in shared] == [True, True, False]

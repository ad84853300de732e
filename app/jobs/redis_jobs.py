"""Jobs on Redis through RQ: queues per grading kind, results under our own key with a TTL (so
waiting is one GET, whatever RQ version runs the workers), idempotency keys set with NX, and a
per-tenant in-flight set. Redis failures become a 503 with a reason, never a lost request."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import redis.asyncio as aioredis
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from app.errors import ApiError, QueueUnavailable
from app.graders.result import GradeResult, Outcome
from app.jobs import keys
from app.jobs.base import ClaimResult, JobView, QueuedGrading, job_id_for, poll_until, too_many_in_flight
from app.redis_link import REDIS_ERRORS, sync_connection
from app.settings import Settings

# KEYS[1] the tenant's in-flight set; ARGV horizon, cap, now, job ids... Reserves every id or none.
_RESERVE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local count = redis.call('ZCARD', KEYS[1])
if count + #ARGV - 3 > tonumber(ARGV[2]) then
  return 0
end
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[i])
end
return 1
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisJobs:
    """``job_function`` is the RQ job a worker runs on each payload: a module-level function that
    the workers can import by the same name (RQ records its module and name)."""

    name = "redis"

    def __init__(self, settings: Settings, job_function: Callable[[dict[str, Any]], Any]) -> None:
        assert settings.redis_url
        self.settings = settings
        self.job_function = job_function
        self.async_redis = aioredis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
        self._sync = sync_connection(settings.redis_url)
        self._queues: dict[str, Queue] = {}

    def _queue(self, kind: str) -> Queue:
        if kind not in self._queues:
            self._queues[kind] = Queue(kind, connection=self._sync, serializer=JSONSerializer)
        return self._queues[kind]

    async def claim(self, tenant: str, request_id: str | None, digest: str) -> ClaimResult:
        job_id = job_id_for(tenant, request_id)
        ttl = self.settings.queue.result_ttl
        try:
            await self.async_redis.set(keys.owner(job_id), tenant, ex=ttl, nx=True)
            if request_id is None:
                return ClaimResult(job_id, new=True)
            if await self.async_redis.set(keys.idempotency(tenant, job_id), digest, ex=ttl, nx=True):
                return ClaimResult(job_id, new=True)
            seen = await self.async_redis.get(keys.idempotency(tenant, job_id))
        except REDIS_ERRORS:
            raise QueueUnavailable("Redis is unreachable") from None
        if seen is not None and _text(seen) != digest:
            raise ApiError(409, "request_id_reused", "this request_id was used for a different request")
        return ClaimResult(job_id, new=False)

    async def enqueue(self, tenant: str, job_id: str, work: QueuedGrading, max_in_flight: int | None = None) -> None:
        queue_settings = self.settings.queue
        payload = work.payload()
        try:
            if max_in_flight is not None:
                await self._reserve_slot(tenant, job_id, max_in_flight)
            await anyio.to_thread.run_sync(lambda: self._queue(work.kind).enqueue(
                self.job_function, payload, job_id=job_id, job_timeout=queue_settings.job_timeout,
                result_ttl=queue_settings.result_ttl, failure_ttl=queue_settings.result_ttl,
                # no interval: a delayed retry would need an RQ scheduler; re-queue at once instead
                retry=Retry(max=queue_settings.retries) if queue_settings.retries else None,
                meta={"tenant": tenant},
            ))
        except REDIS_ERRORS:
            # the claim must not outlive a job that was never queued, or a retry would wait forever
            await self._forget(tenant, job_id)
            raise QueueUnavailable("Redis is unreachable") from None

    async def _reserve_slot(self, tenant: str, job_id: str, cap: int) -> None:
        key = keys.in_flight(tenant)
        now = time.time()
        async with self.async_redis.pipeline(transaction=True) as pipe:
            # entries older than a job's deadline belong to jobs that can no longer be running
            horizon = now - self.settings.queue.job_timeout * (1 + self.settings.queue.retries)
            pipe.zremrangebyscore(key, "-inf", horizon)
            pipe.zcard(key)
            _, count = await pipe.execute()
        if count >= cap:
            await self._forget(tenant, job_id)
            raise too_many_in_flight(cap)
        await self.async_redis.zadd(key, {job_id: now})
        await self.async_redis.expire(key, self.settings.queue.result_ttl)

    async def reserve(self, tenant: str, job_ids: Sequence[str], max_in_flight: int) -> None:
        if not job_ids:
            return
        horizon = time.time() - self.settings.queue.job_timeout * (1 + self.settings.queue.retries)
        try:
            reserved = await self.async_redis.eval(_RESERVE, 1, keys.in_flight(tenant), horizon, max_in_flight,
                                                   time.time(), *job_ids)
            await self.async_redis.expire(keys.in_flight(tenant), self.settings.queue.result_ttl)
        except REDIS_ERRORS:
            for job_id in job_ids:
                await self._forget(tenant, job_id)
            raise QueueUnavailable("Redis is unreachable") from None
        if not int(reserved):
            for job_id in job_ids:
                await self._forget(tenant, job_id)
            raise too_many_in_flight(max_in_flight, len(job_ids))

    async def release(self, tenant: str, job_id: str) -> None:
        await self._forget(tenant, job_id)
        with contextlib.suppress(*REDIS_ERRORS):
            await self.async_redis.zrem(keys.in_flight(tenant), job_id)

    async def _forget(self, tenant: str, job_id: str) -> None:
        with contextlib.suppress(*REDIS_ERRORS):
            await self.async_redis.delete(keys.idempotency(tenant, job_id), keys.owner(job_id))

    async def store(self, tenant: str, job_id: str, result: GradeResult) -> None:
        # on failure the caller still has its result; only a later retry of the same id re-grades
        with contextlib.suppress(*REDIS_ERRORS):
            await self.async_redis.set(keys.result(job_id), result.model_dump_json(), ex=self.settings.queue.result_ttl)

    async def view(self, tenant: str, job_id: str, wait: float) -> JobView | None:
        try:
            owner = await self.async_redis.get(keys.owner(job_id))
            if owner is None or _text(owner) != tenant:
                return None
            found: dict[str, bytes | str] = {}

            async def finished() -> bool:
                raw = await self.async_redis.get(keys.result(job_id))
                if raw is not None:
                    found["raw"] = raw
                return raw is not None

            if await poll_until(finished, wait):
                await self.async_redis.zrem(keys.in_flight(tenant), job_id)
                result = GradeResult.model_validate_json(found["raw"])
                return JobView(job_id, "finished", result.model_copy(update={"job_id": job_id}))
            status = await self.async_redis.hget(keys.rq_job(job_id), "status")
        except REDIS_ERRORS:
            raise QueueUnavailable("Redis is unreachable") from None
        state = _text(status) if status else "queued"
        if state in ("failed", "stopped", "canceled"):
            failed = GradeResult(grading="unknown", outcome=Outcome.error, reward=0.0, job_id=job_id,
                                 explanation="grading failed on every attempt; it was not scored")
            await self.store(tenant, job_id, failed)
            await self.async_redis.zrem(keys.in_flight(tenant), job_id)
            return JobView(job_id, "failed", failed)
        return JobView(job_id, "started" if state == "started" else "queued")

    async def ready(self) -> tuple[bool, str]:
        try:
            await self.async_redis.ping()
        except REDIS_ERRORS as exc:
            return False, f"Redis is unreachable ({type(exc).__name__})"
        return True, "redis: connected"

    async def close(self) -> None:
        await self.async_redis.aclose()
        self._sync.close()

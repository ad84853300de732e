"""Token buckets per tenant, counted in grades (a request costs what it grades, at least 1): in
Redis when configured (one budget across API replicas), in memory otherwise, and in memory as a
fallback while Redis is unreachable, so inline grading keeps answering."""

from __future__ import annotations

import math
import threading
import time

import redis.asyncio as aioredis

from app.redis_link import REDIS_ERRORS

# KEYS[1] bucket; ARGV rate, burst, cost. Uses the server's clock, so replicas agree. All of the
# cost is taken or none: a refused batch costs nothing. The bucket is one string, "tokens time",
# written with its TTL in one SET: four commands a request (EVAL, TIME, GET, SET), counted by
# Redis for every request a tenant makes (a hash and its EXPIRE took five).
_TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local held, at = string.match(redis.call('GET', KEYS[1]) or '', '^(%S+) (%S+)$')
local tokens = tonumber(held) or burst
local ts = tonumber(at) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local wait = 0
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  wait = (cost - tokens) / rate
end
redis.call('SET', KEYS[1], string.format('%.6f %.6f', tokens, now), 'EX', math.ceil(burst / rate) + 10)
return {allowed, tostring(wait)}
"""


class MemoryBuckets:
    def __init__(self) -> None:
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, name: str, rate: float, burst: int, cost: int = 1) -> float:
        """0.0 if allowed (``cost`` tokens taken), else seconds until that many are available
        (none taken)."""
        now = time.monotonic()
        with self._lock:
            tokens, ts = self._state.get(name, (float(burst), now))
            tokens = min(burst, tokens + (now - ts) * rate)
            if tokens >= cost:
                self._state[name] = (tokens - cost, now)
                return 0.0
            self._state[name] = (tokens, now)
            return (cost - tokens) / rate


class RateLimiter:
    def __init__(self, redis_client: aioredis.Redis | None) -> None:
        self._redis = redis_client
        self.redis = redis_client  # shared with the refusal counts (app.jobs.refusals)
        self._script = redis_client.register_script(_TOKEN_BUCKET) if redis_client is not None else None
        self._memory = MemoryBuckets()  # fallback copies of the shared buckets
        # this process's own buckets (reads): a store apart, as a tenant's name may be anything
        self._local = MemoryBuckets()

    async def take(self, name: str, rate: float, burst: int, cost: int = 1, shared: bool = True) -> float:
        """0.0 if allowed, else seconds to wait. A cost over the burst can never be paid: the
        caller refuses it before asking (see ``app.api.auth.charge_grades``). ``shared=False``
        takes from this process's own bucket of that name, apart from the shared one."""
        if math.isinf(rate):
            return 0.0
        if not shared:
            return self._local.take(name, rate, burst, cost)
        if self._script is not None:
            try:
                allowed, wait = await self._script(keys=[f"sg:tokens:{name}"], args=[rate, burst, cost])
                return 0.0 if int(allowed) else float(wait)
            except REDIS_ERRORS:
                pass  # degrade to this replica's own bucket rather than refuse every request
        return self._memory.take(name, rate, burst, cost)

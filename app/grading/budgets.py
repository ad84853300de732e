"""Grade budgets for held-out items: how many grades one tenant may spend on one item per window.

Any reward is an oracle given enough grades; on a held-out split a grade says only pass or fail
at the task's own tolerance, so a search for the gold costs hundreds of grades per item, and this
budget bounds it (docs/splits.md gives the arithmetic of the default). Counts live in Redis when
the deployment has it (one budget across API replicas), in memory otherwise. A request is
charged whole or not at all, so a batch that would cross a budget is refused before any of its
items is graded."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping

import redis.asyncio as aioredis

from app.errors import ApiError
from app.redis_link import REDIS_ERRORS

# KEYS: one counter per item; ARGV[1] budget, ARGV[2] window seconds, ARGV[3..] grades asked per
# key. All or nothing: {0, ttl} when any counter would pass the budget, else {1, 0}.
_SPEND = """
local budget = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  local used = tonumber(redis.call('GET', key) or '0')
  if used + tonumber(ARGV[i + 2]) > budget then
    local ttl = redis.call('TTL', key)
    if ttl < 0 then ttl = window end
    return {0, ttl}
  end
end
for i, key in ipairs(KEYS) do
  local n = redis.call('INCRBY', key, tonumber(ARGV[i + 2]))
  if redis.call('TTL', key) < 0 then redis.call('EXPIRE', key, window) end
end
return {1, 0}
"""


def over_budget(retry_after: float) -> ApiError:
    seconds = max(1, math.ceil(retry_after))
    return ApiError(429, "grade_budget_exhausted",
                    "this tenant has used its grades for a held-out item in this window",
                    {"Retry-After": str(seconds)})


class MemoryBudgets:
    """Fixed windows starting at an item's first grade; this process's own counts."""

    def __init__(self) -> None:
        self._state: dict[str, tuple[int, float]] = {}  # key -> (grades used, window end)
        self._lock = threading.Lock()

    def spend(self, counts: Mapping[str, int], budget: int, window: int) -> float:
        """0.0 if charged, else seconds until the first full counter's window ends."""
        now = time.monotonic()
        with self._lock:
            current = {}
            for key in counts:
                used, ends = self._state.get(key, (0, now + window))
                current[key] = (0, now + window) if ends <= now else (used, ends)
            for key, n in counts.items():
                used, ends = current[key]
                if used + n > budget:
                    return max(ends - now, 1.0)
            for key, n in counts.items():
                used, ends = current[key]
                self._state[key] = (used + n, ends)
            return 0.0


class GradeBudgets:
    def __init__(self, redis_client: aioredis.Redis | None = None) -> None:
        self._script = redis_client.register_script(_SPEND) if redis_client is not None else None
        self._memory = MemoryBudgets()

    async def spend(self, tenant: str, per_item: Mapping[str, int], budget: int, window: int) -> None:
        """Charge ``per_item`` grades (task id -> count) to ``tenant``, or raise a 429 ApiError."""
        if not per_item:
            return
        counts = {f"sg:budget:{tenant}:{item}": n for item, n in sorted(per_item.items())}
        if self._script is not None:
            try:
                ok, ttl = await self._script(keys=list(counts), args=[budget, window, *counts.values()])
            except REDIS_ERRORS:
                pass  # this replica's own counts rather than no budget at all
            else:
                if not int(ok):
                    raise over_budget(float(ttl))
                return
        wait = self._memory.spend(counts, budget, window)
        if wait:
            raise over_budget(wait)

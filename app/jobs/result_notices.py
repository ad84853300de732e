"""Waiting for a job's result without polling Redis.

A worker's write of a result announces it on one channel (app.jobs.leases): the job id, a
newline, and the result as written. Each API process keeps one subscription to it, in a
background task, and hands the result to the requests waiting for that job. A request reads the
result key once when it starts waiting (the result may be there already), and again only every
few seconds in case an announcement was missed (published while the subscription was
reconnecting): one command per waited job instead of one GET every 100 ms."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from app.jobs import keys
from app.redis_link import REDIS_ERRORS

log = logging.getLogger(__name__)
# A waiting request reads the result at least this often. Only a safety net: both ways a result
# is stored announce it, and a reconnection of the subscription wakes every waiter to read; each
# recheck is a Redis command per waiting request, so a deep queue of waiting clients pays for it.
RECHECK_SECONDS = 15.0
_SUBSCRIBE_WAIT_SECONDS = 1.0  # how long a first waiter waits for the subscription to be up


class _Waiter:
    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.result: bytes | None = None


class ResultNotices:
    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._waiters: dict[str, set[_Waiter]] = {}
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def wait_for(self, job_id: str, read: Callable[[], Awaitable[Any]], wait: float,
                       first: Callable[[], Awaitable[Any]] | None = None) -> Any:
        """read() (the stored result, or None) once it is not None, or None after `wait` seconds.
        ``first``, if given, is the first read instead of read() (a caller that reads more with it:
        whatever it returns that is not None is returned at once)."""
        deadline = time.monotonic() + wait
        waiter = _Waiter()
        self._waiters.setdefault(job_id, set()).add(waiter)  # before the first read: no announcement is missed
        try:
            await self._ensure_listening()
            found = await (first or read)()
            while True:
                remaining = deadline - time.monotonic()
                if found is not None or remaining <= 0:
                    return found
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.event.wait(), min(remaining, RECHECK_SECONDS))
                waiter.event.clear()
                # the announced result, else (a recheck, or a wake-up after a reconnection) a read
                found = waiter.result if waiter.result is not None else await read()
        finally:
            waiting = self._waiters.get(job_id)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[job_id]

    async def _ensure_listening(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen(), name="result-notices")
        if not self._subscribed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._subscribed.wait(), _SUBSCRIBE_WAIT_SECONDS)

    def _wake(self, job_id: str, result: bytes | None = None) -> None:
        for waiter in self._waiters.get(job_id, ()):
            waiter.result = result
            waiter.event.set()

    async def _listen(self) -> None:
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(keys.RESULTS_CHANNEL)
                self._subscribed.set()
                while True:
                    # An explicit timeout: an idle channel is not a dead connection.
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        data = message["data"]
                        raw = data if isinstance(data, bytes) else str(data).encode()
                        announced, _, result = raw.partition(b"\n")
                        self._wake(announced.decode(), result or None)
            except REDIS_ERRORS:
                self._subscribed.clear()
                for job_id in list(self._waiters):  # announcements may have been missed: read again
                    self._wake(job_id)
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

"""Waiting for a job's result without polling Redis.

A worker's write of a result announces it on one channel (app.jobs.leases): the job id, a
newline, and the result as written. Each API process keeps one subscription to it, in a
background task, and hands the result to the requests waiting for that job. A request reads the
result key once when it starts waiting (the result may be there already) and then only when
told to: one command per waited job, however long it waits.

An announcement is missed only while the subscription is down, and every way back up wakes
every waiting request to read once: the listener's own reconnection after an error, and
redis-py's silent one (its pub/sub reconnects and subscribes again inside a read, raising
nothing), both of which end in Redis confirming the subscription, the message the listener
wakes them on. A result written before that confirmation is in Redis when they read; one
written after it is announced. A subscription whose peer went away without a word (a network
cut, a host gone) is found dead by TCP keepalive within seconds (app.jobs.redis_jobs), not by
commands. Until 2026-12-03 each waiting request also read every 15 s in case an announcement
was missed, which a deep queue of waiting clients paid for: about 6 reads per job in the stack
soak's impl jobs."""

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
_SUBSCRIBE_WAIT_SECONDS = 1.0  # how long a first waiter waits for the subscription to be up
_RECONNECT_PAUSE_SECONDS = 1.0


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

    async def expect(self, job_id: str) -> _Waiter | None:
        """A waiter for a job that is not queued yet, registered while the subscription is up: its
        result cannot be written before the job is queued, and from now on it is announced to this
        waiter, so its wait (``wait_for(..., expected=)``) needs no first read. None while the
        subscription is down (that wait reads first, as any other). The caller hands it to
        wait_for, or to ``forget`` if it will not wait."""
        await self._ensure_listening()
        if not self._subscribed.is_set():
            return None
        waiter = _Waiter()
        self._waiters.setdefault(job_id, set()).add(waiter)
        return waiter

    def forget(self, job_id: str, waiter: _Waiter) -> None:
        waiting = self._waiters.get(job_id)
        if waiting is not None:
            waiting.discard(waiter)
            if not waiting:
                del self._waiters[job_id]

    async def wait_for(self, job_id: str, read: Callable[[], Awaitable[Any]], wait: float,
                       first: Callable[[], Awaitable[Any]] | None = None, expected: _Waiter | None = None) -> Any:
        """read() (the stored result, or None) once it is not None, or None after `wait` seconds.
        ``first``, if given, is the first read instead of read() (a caller that reads more with it:
        whatever it returns that is not None is returned at once). ``expected``: the waiter
        ``expect`` registered before the job was queued: no first read (unless it was woken
        without a result already: the subscription went down or came back since)."""
        deadline = time.monotonic() + wait
        waiter = expected or _Waiter()
        self._waiters.setdefault(job_id, set()).add(waiter)  # before the first read: no announcement is missed
        try:
            if expected is not None and not expected.event.is_set():
                found = None  # nothing announced yet, and nothing was written before the job was queued
            elif expected is not None and expected.result is not None:
                expected.event.clear()
                found = expected.result  # announced already
            else:  # (an expected waiter woken without a result: the subscription went down or came back)
                waiter.event.clear()
                await self._ensure_listening()
                found = await (first or read)()
            while True:
                remaining = deadline - time.monotonic()
                if found is not None or remaining <= 0:
                    return found
                try:
                    await asyncio.wait_for(waiter.event.wait(), remaining)
                except TimeoutError:
                    return None
                waiter.event.clear()
                # the announced result, else (the subscription came back, or went down) a read
                found = waiter.result if waiter.result is not None else await read()
        finally:
            self.forget(job_id, waiter)

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
            # subscribe confirmations are wanted: each one (the first, and each of redis-py's
            # silent re-subscriptions) is the moment from which nothing can be missed
            pubsub = self.redis.pubsub(ignore_subscribe_messages=False)
            try:
                await pubsub.subscribe(keys.RESULTS_CHANNEL)
                while True:
                    # An explicit timeout: an idle channel is not a dead connection.
                    message = await pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    if message.get("type") == "subscribe":
                        self._subscribed.set()
                        self._wake_all()  # what was written before this is there to read
                    elif message.get("type") == "message":
                        data = message["data"]
                        raw = data if isinstance(data, bytes) else str(data).encode()
                        announced, _, result = raw.partition(b"\n")
                        self._wake(announced.decode(), result or None)
            except Exception as exc:  # any: a listener that died would leave its waiters asleep
                if not isinstance(exc, REDIS_ERRORS):
                    log.exception("result notices: listener failed; subscribing again")
                self._subscribed.clear()
                self._wake_all()  # announcements may be missed until the next confirmation
                await asyncio.sleep(_RECONNECT_PAUSE_SECONDS)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _wake_all(self) -> None:
        for job_id in list(self._waiters):
            self._wake(job_id)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

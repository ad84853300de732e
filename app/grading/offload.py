"""Grading CPU off the event loop, on a small fixed set of worker threads, shared fairly by tenants.

Large completions, rows answers, big bodies and whole batches are graded on threads so that the
event loop (which answers /healthz and every small request) never runs them. Threads still share
the GIL with the loop, and the interpreter hands it over every switch interval: the more threads
grade at once, the longer the loop waits for its turn. So grading uses at most ``GRADING_THREADS``
threads at a time, whatever the number of requests (more would not grade faster under the GIL,
only starve the loop), and the switch interval is shortened so the loop's wait stays a few
milliseconds (see bench/bench_hostile.py for the /healthz latency under attack).

The threads are handed out per tenant in turn (round robin over the tenants waiting, first come
first served within one): a tenant with a backlog of heavy batches gets a thread every other
turn, so another tenant's call waits for at most the calls in progress and one more of each
tenant ahead of it in the round, not for the backlog. Callers keep each call small (batches are
graded in chunks) so that wait stays short."""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TypeVar

import anyio

GRADING_THREADS = 2
# Python's default is 5 ms; the loop waits up to this per hand-over while grading threads run.
SWITCH_INTERVAL_SECONDS = 0.001

T = TypeVar("T")


class FairSlots:
    """``n`` slots, given to waiting tenants in turn. Used from one event loop only."""

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    async def acquire(self, tenant: str) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # handed a slot just as the caller gave up: pass it on
            else:
                queue = self._waiting.get(tenant)
                if queue is not None and granted in queue:
                    queue.remove(granted)
                    if not queue:
                        del self._waiting[tenant]
            raise

    def release(self) -> None:
        while self._waiting:
            tenant, queue = next(iter(self._waiting.items()))
            granted = queue.popleft()
            if queue:
                self._waiting.move_to_end(tenant)  # its next call waits for the other tenants' turns
            else:
                del self._waiting[tenant]
            if not granted.done():
                granted.set_result(None)
                return
        self.free += 1


_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[FairSlots, anyio.CapacityLimiter]] = (
    weakref.WeakKeyDictionary())


def _of_loop() -> tuple[FairSlots, anyio.CapacityLimiter]:
    loop = asyncio.get_running_loop()
    found = _slots.get(loop)
    if found is None:
        found = _slots[loop] = (FairSlots(GRADING_THREADS), anyio.CapacityLimiter(GRADING_THREADS))
        if sys.getswitchinterval() > SWITCH_INTERVAL_SECONDS:
            sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    return found


async def off_loop(fn: Callable[..., T], *args: object, tenant: str | None = None) -> T:
    """``fn(*args)`` on one of the grading threads; waits for ``tenant``'s turn at a free one."""
    slots, limiter = _of_loop()
    await slots.acquire(tenant or "")
    try:
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
    finally:
        slots.release()

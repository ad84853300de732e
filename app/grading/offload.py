"""Grading CPU off the event loop, shared fairly by tenants: in the grading processes
(app/grading/processes.py) for the heavy pure work, on a few threads for the cheap rest.

The heavy work (grading a large inline item or a chunk of a batch, parsing and validating a large
body) runs in a small pool of processes (``in_process``): their interpreters are not the event
loop's, so however long an item takes, the loop never waits for an interpreter lock it holds.
What is left on threads (``off_loop``: serialising a response, checking a batch's items, reading
reward labels) is small per call and shares the lock with the loop, so at most ``GRADING_THREADS``
threads run it at once and the switch interval is shortened to keep the loop's wait short.

Each pool (the processes, and the threads) is handed out per tenant in turn (round robin over the
tenants waiting, first come first served within one): a tenant with a backlog of heavy batches
gets a slot every other turn, so another tenant's call waits for at most the calls in progress
and one more of each tenant ahead of it in the round, not for the backlog. Callers keep each call
small (batches are graded in chunks) so that wait stays short."""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TypeVar

import anyio

from app.grading.processes import GradingProcesses

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


_process_slots: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[GradingProcesses, tuple[FairSlots, anyio.CapacityLimiter]]] = (
    weakref.WeakKeyDictionary())


async def in_process(processes: GradingProcesses, fn: Callable[..., T], *args: object, tenant: str | None = None) -> T:
    """``fn(*args)`` in one of the grading processes; waits for ``tenant``'s turn at a free one.
    Raises what ``GradingProcesses.call`` raises (a child that died, a call that failed there)."""
    pools = _process_slots.setdefault(asyncio.get_running_loop(), {})
    found = pools.get(processes)
    if found is None:
        found = pools[processes] = (FairSlots(processes.size), anyio.CapacityLimiter(processes.size))
    slots, limiter = found
    await slots.acquire(tenant or "")
    try:
        # The thread only waits on the child's pipe (without the interpreter lock). A cancelled
        # caller (a client gone) waits for the call to end, so the child is free for the next one.
        return await anyio.to_thread.run_sync(processes.call, fn, *args, limiter=limiter)
    finally:
        slots.release()


async def off_loop(fn: Callable[..., T], *args: object, tenant: str | None = None) -> T:
    """``fn(*args)`` on one of the grading threads (cheap work only: threads share the loop's
    interpreter lock); waits for ``tenant``'s turn at a free one."""
    slots, limiter = _of_loop()
    await slots.acquire(tenant or "")
    try:
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
    finally:
        slots.release()

"""Grading CPU off the event loop, on a small fixed set of worker threads.

Large completions, rows answers, big bodies and whole batches are graded on threads so that the
event loop (which answers /healthz and every small request) never runs them. Threads still share
the GIL with the loop, and the interpreter hands it over every switch interval: the more threads
grade at once, the longer the loop waits for its turn. So grading uses at most ``GRADING_THREADS``
threads at a time, whatever the number of requests (more would not grade faster under the GIL,
only starve the loop), and the switch interval is shortened so the loop's wait stays a few
milliseconds (see bench/bench_hostile.py for the /healthz latency under attack)."""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Callable
from typing import TypeVar

import anyio

GRADING_THREADS = 2
# Python's default is 5 ms; the loop waits up to this per hand-over while grading threads run.
SWITCH_INTERVAL_SECONDS = 0.001

T = TypeVar("T")

_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(GRADING_THREADS)
        if sys.getswitchinterval() > SWITCH_INTERVAL_SECONDS:
            sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    return limiter


async def off_loop(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on one of the grading threads; waits for a free one."""
    return await anyio.to_thread.run_sync(fn, *args, limiter=_limiter())

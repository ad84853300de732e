"""The grading threads are handed to waiting tenants in turn: a tenant with a backlog cannot make
another tenant's call wait for the whole backlog."""

from __future__ import annotations

import asyncio
import threading

from app.grading.offload import GRADING_THREADS, FairSlots, off_loop


def test_a_small_tenant_is_served_before_a_backlog_queued_earlier() -> None:
    order: list[str] = []
    gate = threading.Event()

    def work(name: str) -> None:
        gate.wait(10)
        order.append(name)

    async def run() -> None:
        backlog = [asyncio.create_task(off_loop(work, f"heavy-{i}", tenant="heavy")) for i in range(12)]
        await asyncio.sleep(0.05)  # the backlog holds both threads and waits for more
        small = asyncio.create_task(off_loop(work, "small", tenant="small"))
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(small, *backlog)

    asyncio.run(run())
    # the calls in progress when it arrived finish first, then at most one more of the tenant
    # ahead of it in the round (it was waiting first), then the small tenant's turn: not the
    # ten heavy calls still queued
    assert order.index("small") <= GRADING_THREADS + 1


def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    async def run() -> int:
        slots = FairSlots(1)
        await slots.acquire("a")
        waiter = asyncio.create_task(slots.acquire("b"))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        slots.release()
        await asyncio.wait_for(slots.acquire("c"), 1)  # not lost to the cancelled waiter
        return slots.free

    assert asyncio.run(run()) == 0

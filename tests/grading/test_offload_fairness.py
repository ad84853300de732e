"""The grading threads are handed to waiting tenants in turn: a tenant with a backlog cannot make
another tenant's call wait for the whole backlog."""

from __future__ import annotations

import asyncio
import threading

from app.grading.offload import GRADING_THREADS, FairSlots, off_loop


def test_a_small_tenant_is_handed_a_thread_before_a_backlog_queued_earlier() -> None:
    # the grant order is decided on the loop; which granted thread runs first is the OS's race,
    # so the order is read where slots are handed out
    granted: list[str] = []

    async def call(slots: FairSlots, name: str, tenant: str) -> None:
        await slots.acquire(tenant)
        granted.append(name)

    async def run() -> None:
        slots = FairSlots(GRADING_THREADS)
        backlog = [asyncio.create_task(call(slots, f"heavy-{i}", "heavy")) for i in range(12)]
        await asyncio.sleep(0)  # the backlog holds every slot and waits for more
        small = asyncio.create_task(call(slots, "small", "small"))
        await asyncio.sleep(0)
        for _ in range(11):
            slots.release()
            await asyncio.sleep(0)
        await asyncio.gather(small, *backlog)

    asyncio.run(run())
    # the calls holding slots when it arrived, then at most one more of the tenant ahead of it
    # in the round (it was waiting first), then the small tenant: not the ten heavy calls queued
    assert granted.index("small") <= GRADING_THREADS + 1
    assert sorted(granted) == sorted([f"heavy-{i}" for i in range(12)] + ["small"])


def test_off_loop_runs_every_tenants_calls_on_the_grading_threads() -> None:
    loop_thread = threading.get_ident()

    def work(name: str) -> tuple[str, bool]:
        return name, threading.get_ident() != loop_thread

    async def run() -> list[tuple[str, bool]]:
        calls = [off_loop(work, f"heavy-{i}", tenant="heavy") for i in range(6)]
        calls.append(off_loop(work, "small", tenant="small"))
        return await asyncio.gather(*calls)

    results = asyncio.run(run())
    assert [name for name, _ in results] == [f"heavy-{i}" for i in range(6)] + ["small"]
    assert all(off_thread for _, off_thread in results)


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

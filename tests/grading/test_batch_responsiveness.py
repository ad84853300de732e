"""A large inline batch is graded off the event loop, so other requests keep being served while
it runs. Measured as event-loop turns taken by a concurrent ticker while the batch is graded (a
count, not a time): graded on the loop, the ticker got about one turn for the whole batch."""

from __future__ import annotations

import asyncio

import pytest

from app.grading.models import GradeRequest
from app.grading.service import INLINE_CHUNK, GradingService
from app.settings import Settings
from app.tasks.synthetic.bank import SyntheticBank


@pytest.mark.slow
def test_event_loop_keeps_turning_while_a_large_batch_is_graded() -> None:
    tasks = SyntheticBank().batch(seed=8, n=200)
    requests = [GradeRequest(task_id=t.id, completion="Final answer: " + ", ".join(t.gold)) for t in tasks] * 20
    service = GradingService(Settings())

    async def scenario() -> tuple[list, int]:
        done = False
        turns = 0

        async def ticker() -> None:
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        results = await service.grade_many(requests)
        done = True
        await tick
        return results, turns

    results, turns = asyncio.run(scenario())
    assert len(results) == len(requests) and all(r.reward == 1.0 for r in results)
    assert turns > len(requests) // INLINE_CHUNK  # at least a turn per chunk handed to a thread

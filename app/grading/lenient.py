"""Grading for trainers' label endpoints and in-process adapters: lenient on purpose. A trainer
cannot drop one item from its batch, so an unreadable label or a judge item without a usable
judge becomes that item's unscored result, with the reason, never a refused batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from app.errors import ApiError, JobPending
from app.graders.result import GradeResult
from app.grading.labels import in_order, pending, requests_for, settle, unscored
from app.grading.models import GradeRequest
from app.grading.offload import off_loop
from app.grading.service import GradingService
from app.tenants import LOCAL_TENANT, Tenant


async def grade_leniently(service: GradingService, items: Sequence[GradeRequest],
                          tenant: Tenant = LOCAL_TENANT, *, per_item_judge: bool = True,
                          reward_only: bool = False) -> list[GradeResult]:
    """Grade in order, waiting as long as the service allows for queued kinds (unless an item
    sets its own wait): results, never job ids. ``per_item_judge``: judge items without a usable
    judge are unscored one by one instead of refusing the whole batch. ``reward_only``: the
    caller passes on only rewards, outcomes and unscored reasons (see ``GradingService.grade``)."""
    if not items:
        return []
    longest = service.settings.limits.max_wait_seconds
    for item in items:  # parsed for this call alone: set in place (a copy costs more than parsing)
        if item.wait is None:
            item.wait = longest

    async def one(item: GradeRequest) -> GradeResult:
        # One item (OpenRLHF sends one rollout per request) is graded as /v1/grade grades it, on
        # the event loop: the worker-thread hop a batch takes costs more than a numeric grade.
        try:
            return await service.grade(item, tenant, reward_only=reward_only)
        except JobPending as still_queued:
            return settle([still_queued])[0]
        except ApiError as refused:
            if refused.error == "judge_unavailable" and per_item_judge:
                return unscored(f"judge_unavailable: {refused.detail}", "no_judge")
            return service._refused(item, refused)  # as grade_many: raises what concerns the whole batch

    if len(items) == 1:
        return [await one(items[0])]
    try:
        return settle(await service.grade_many(items, tenant, reward_only=reward_only))
    except ApiError as problem:
        if not per_item_judge or problem.error != "judge_unavailable":
            raise
    return list(await asyncio.gather(*(one(item) for item in items)))


async def grade_labelled_with(service: GradingService, labels: Sequence[Any], completions: Sequence[Any],
                              tenant: Tenant = LOCAL_TENANT, **options: Any) -> list[GradeResult]:
    """Grade (label, completion) pairs in order; ``options`` are GradeRequest fields."""
    # Reading labels is linear in their size, and a batch may carry megabytes: off the event loop.
    slots = await off_loop(lambda: requests_for(zip(labels, completions, strict=True), **options), tenant=tenant.name)
    return in_order(slots, await grade_leniently(service, pending(slots), tenant))

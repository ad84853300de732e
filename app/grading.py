"""From a grade request to a GradeResult: resolve the task (by id or from an inline reference),
then grade inline (numeric, rows) or off the event loop (judge, impl). The HTTP layer and the
reward adapters all come through here, so every entry point grades the same way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import anyio

from app.api.errors import ApiError
from app.api.schemas import GradeRequest, completion_text
from app.graders import dispatch
from app.graders.result import GradeResult, Outcome
from app.graders.units import parse_quantity
from app.observability import record_grade
from app.settings import Settings
from app.tasks.base import INLINE_KINDS, Task, UnknownTask
from app.tasks.registry import resolve_task


def task_from_reference(request: GradeRequest) -> Task:
    reference = request.reference
    assert reference is not None
    if reference.values is not None:
        for i, value in enumerate(reference.values):
            try:
                parse_quantity(value)
            except ValueError:
                raise ApiError(422, "invalid_reference", f"reference.values[{i}] is not a single quantity") from None
        return Task(id="", split="", prompt="", grading="numeric", gold=tuple(reference.values),
                    tolerance=reference.tolerance)
    return Task(id="", split="", prompt="", grading="rows", gold=reference.rows, tolerance=reference.tolerance)


class GradingService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Bound the threads that queued kinds may occupy in embedded mode.
        self._limiter = anyio.CapacityLimiter(8)

    def prepare(self, request: GradeRequest) -> tuple[Task, str]:
        text = completion_text(request.completion)
        if len(text) > self.settings.limits.max_completion_chars:
            raise ApiError(413, "completion_too_long",
                           f"the completion exceeds {self.settings.limits.max_completion_chars} characters")
        if request.task_id is not None:
            try:
                task = resolve_task(request.task_id, self.settings)
            except UnknownTask:
                raise ApiError(404, "unknown_task", "no task has this id") from None
        else:
            task = task_from_reference(request)
        return task, text

    def grade_now(self, task: Task, text: str, request: GradeRequest) -> GradeResult:
        start = time.perf_counter()
        result = dispatch.grade(task, text, request.options(), self.settings)
        record_grade(result.split, result.grading, result.outcome.value, time.perf_counter() - start)
        return result

    async def grade(self, request: GradeRequest) -> GradeResult:
        task, text = self.prepare(request)
        if task.grading in INLINE_KINDS:
            return self.grade_now(task, text, request)
        return await anyio.to_thread.run_sync(self.grade_now, task, text, request, limiter=self._limiter)

    async def grade_many(self, requests: Sequence[GradeRequest]) -> list[GradeResult]:
        """Grade in order; a bad item becomes an unscored invalid_request, not a failed batch."""

        async def one(request: GradeRequest) -> GradeResult:
            try:
                return await self.grade(request)
            except ApiError as problem:
                return GradeResult(task_id=request.task_id, grading="unknown", outcome=Outcome.invalid_request,
                                   reward=0.0, explanation=problem.detail)

        return list(await asyncio.gather(*(one(r) for r in requests)))

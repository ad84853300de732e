"""Route a task to the grader for its kind. Each grader is a pure function
``grade(task, completion, options, settings) -> GradeResult``; this module only chooses one and
turns an unexpected exception into an unscored ``error`` outcome, never a reward."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from app.graders.result import GradeResult, Outcome

if TYPE_CHECKING:
    from app.settings import Settings
    from app.tasks.base import Task

log = logging.getLogger(__name__)


class JudgeSpec(BaseModel):
    model: str = Field(min_length=1, max_length=200)
    base_url: str | None = Field(None, max_length=500)


class GradeOptions(BaseModel):
    """Per-request knobs. JSON-safe, so they travel unchanged to a queue worker."""

    tolerance: float | None = Field(None, gt=0, lt=1, description="relative tolerance override")
    all_or_nothing: bool = Field(False, description="impl: reward 1 only if every case passes")
    partial_credit: bool = Field(False, description="rows: reward the fraction of rows right")
    judge: JudgeSpec | None = None


# kind -> "module:function"; imported on first use so the numeric path never loads the sandbox.
GRADERS: dict[str, str] = {
    "numeric": "app.graders.numeric:grade_task",
    "rows": "app.graders.rows:grade_task",
    "judge": "app.graders.judge:grade_task",
    "impl": "app.graders.impl:grade_task",
}

GraderFn = Callable[["Task", str, GradeOptions, "Settings"], GradeResult]
_loaded: dict[str, GraderFn] = {}


def grader_for(kind: str) -> GraderFn:
    fn = _loaded.get(kind)
    if fn is None:
        if kind not in GRADERS:
            raise LookupError(f"no grader for kind {kind!r}")
        module_name, func_name = GRADERS[kind].split(":")
        fn = getattr(importlib.import_module(module_name), func_name)
        _loaded[kind] = fn
    return fn


def grade(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    try:
        result = grader_for(task.grading)(task, completion, options, settings)
    except Exception:  # a grader bug must cost the caller a reward, not the whole batch
        log.exception("grader for %s failed on %s", task.grading, task.id)
        result = GradeResult(
            grading=task.grading,
            outcome=Outcome.error,
            reward=0.0,
            explanation="the grader failed on this item; it was not scored",
        )
    result.task_id = task.id or None
    result.split = task.split or None
    return result

"""Route a task to the grader its kind registered (app/graders/kinds.py). Each grader is a pure
function ``grade(task, completion, options, settings) -> GradeResult``; this module only chooses one
and turns an unexpected exception into an unscored ``error`` outcome, never a reward."""

from __future__ import annotations

import logging

from app.graders.kinds import GraderFn, grader_spec
from app.graders.options import GradeOptions
from app.graders.result import GradeResult, Outcome
from app.settings import Settings
from app.tasks.base import Task

log = logging.getLogger(__name__)


def grader_for(kind: str) -> GraderFn:
    """LookupError for a kind no GraderSpec registered."""
    return grader_spec(kind).grade


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

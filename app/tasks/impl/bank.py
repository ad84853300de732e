"""The ``impl`` split: one task per exercise. The task's gold is the exercise name; hidden cases
and the reference solution stay in the service."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.tasks.base import FiniteBank, Task
from app.tasks.impl.exercises import ALL
from app.tasks.impl.spec import Exercise

if TYPE_CHECKING:
    from app.settings import Settings

DESCRIPTION = "implementation exercises in Python and CPU JAX, graded by hidden cases in a sandbox"


def task_for(exercise: Exercise) -> Task:
    return Task(
        id=exercise.task_id,
        split="impl",
        prompt=exercise.prompt(),
        grading="impl",
        gold=exercise.name,
        chapter=exercise.chapter,
        tags=exercise.tags,
        meta={
            "title": exercise.title,
            "entry": exercise.entry,
            "language": "python",
            "needs_jax": exercise.profile == "jax",
            "hidden_cases": exercise.case_count,
        },
        hidden={"exercise": exercise},  # what the impl grader runs: hidden cases and limits
    )


def load_bank(settings: Settings | None = None) -> FiniteBank:
    return FiniteBank("impl", DESCRIPTION, [task_for(e) for e in ALL])

"""The grading kinds, one GraderSpec each: the grade function a task of that kind goes to, and
whether it is graded inline (in the request) or queued, and on which queue. Every list of kinds
derives from here: dispatch, which kinds the service queues, the queues workers serve and the
status page counts. Adding a grader is its module and one ``register_grader`` call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.graders import impl, judge, numeric, rows
from app.graders.options import GradeOptions
from app.graders.result import GradeResult
from app.settings import Settings
from app.tasks.base import Task

# A pure function of its arguments; dispatch turns an exception into an unscored error outcome.
GraderFn = Callable[[Task, str, GradeOptions, Settings], GradeResult]


@dataclass(frozen=True, slots=True)
class GraderSpec:
    kind: str  # the value of Task.grading it grades
    grade: GraderFn
    # None: graded inside the API request (cheap and local). A name: the queue its grades go
    # through (RQ with Redis, a thread pool in embedded mode), for kinds that call out to a judge
    # or run candidate code; workers serve every such queue unless told otherwise.
    queue: str | None = None

    @property
    def inline(self) -> bool:
        return self.queue is None


_SPECS: dict[str, GraderSpec] = {}


def register_grader(spec: GraderSpec) -> GraderSpec:
    if not spec.kind or spec.kind in _SPECS:
        raise ValueError(f"grading kind {spec.kind!r} is empty or registered already")
    if spec.queue is not None and not spec.queue.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"grading kind {spec.kind!r}: queue {spec.queue!r} must be letters, digits, - or _")
    _SPECS[spec.kind] = spec
    return spec


def grader_spec(kind: str) -> GraderSpec:
    try:
        return _SPECS[kind]
    except KeyError:
        raise LookupError(f"no grader for kind {kind!r}") from None


def grading_kinds() -> list[str]:
    return list(_SPECS)


def is_inline(kind: str) -> bool:
    """Graded in the request. An unknown kind counts as inline: dispatch answers it at once with an
    unscored error rather than leave it on a queue no worker serves."""
    spec = _SPECS.get(kind)
    return spec is None or spec.queue is None


def queue_of(kind: str) -> str:
    """The queue of a queued kind (LookupError for an unknown or inline one)."""
    queue = grader_spec(kind).queue
    if queue is None:
        raise LookupError(f"kind {kind!r} is graded inline")
    return queue


def queue_names() -> tuple[str, ...]:
    """Every queue a queued kind uses, sorted: what a worker serves by default and what the status
    page and /metrics count (a Redis shared with other applications may hold queues of theirs)."""
    return tuple(sorted({spec.queue for spec in _SPECS.values() if spec.queue is not None}))


register_grader(GraderSpec(kind="numeric", grade=numeric.grade_task))
register_grader(GraderSpec(kind="rows", grade=rows.grade_task))
register_grader(GraderSpec(kind="judge", grade=judge.grade_task, queue="judge"))
register_grader(GraderSpec(kind="impl", grade=impl.grade_task, queue="impl"))

"""The grading-kind registry (app/graders/kinds.py): dispatch, inline or queued, and queue names all
come from one registration per kind; a registration cannot take over a kind that exists."""

from __future__ import annotations

import pytest

from app.graders import dispatch, impl, judge, kinds, numeric, rows
from app.graders.kinds import GraderSpec, grader_spec, is_inline, queue_names, queue_of, register_grader
from app.graders.options import GradeOptions
from app.graders.result import GradeResult, Outcome
from app.settings import Settings
from app.tasks.base import Task

SETTINGS = Settings()


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kinds registered by the test are gone after it."""
    monkeypatch.setattr(kinds, "_SPECS", dict(kinds._SPECS))


def always_right(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    return GradeResult(grading=task.grading, outcome=Outcome.correct, reward=1.0, explanation="yes")


def test_the_built_in_kinds_and_where_they_are_graded() -> None:
    assert {k: (grader_spec(k).grade, grader_spec(k).queue) for k in kinds.grading_kinds()} == {
        "numeric": (numeric.grade_task, None), "rows": (rows.grade_task, None),
        "judge": (judge.grade_task, "judge"), "impl": (impl.grade_task, "impl")}
    assert queue_names() == ("impl", "judge")
    assert [k for k in kinds.grading_kinds() if is_inline(k)] == ["numeric", "rows"]


def test_a_registered_kind_is_dispatched_and_queued(own_registry: None) -> None:
    register_grader(GraderSpec(kind="mine", grade=always_right, queue="slow"))
    register_grader(GraderSpec(kind="mine2", grade=always_right, queue="slow"))  # queues may be shared
    task = Task(id="x/1", split="x", prompt="p", grading="mine", gold=None)
    result = dispatch.grade(task, "anything", GradeOptions(), SETTINGS)
    assert (result.outcome, result.reward, result.task_id) == (Outcome.correct, 1.0, "x/1")
    assert not is_inline("mine") and queue_of("mine") == "slow"
    assert queue_names() == ("impl", "judge", "slow")


@pytest.mark.parametrize("spec", [
    GraderSpec(kind="numeric", grade=always_right),  # an always-1 grader cannot replace a real one
    GraderSpec(kind="judge", grade=always_right, queue=None),  # nor move a queued kind inline
    GraderSpec(kind="", grade=always_right),
    GraderSpec(kind="mine", grade=always_right, queue="a b"),
    GraderSpec(kind="mine", grade=always_right, queue="rq:queue:impl"),
])
def test_a_registration_that_could_take_over_or_break_is_refused(own_registry: None, spec: GraderSpec) -> None:
    with pytest.raises(ValueError):
        register_grader(spec)
    assert grader_spec("numeric").grade is numeric.grade_task and queue_of("judge") == "judge"


def test_an_unregistered_kind_is_answered_at_once_and_unscored() -> None:
    task = Task(id="x/1", split="x", prompt="p", grading="nobody", gold=None)
    assert is_inline("nobody")  # never left on a queue no worker serves
    result = dispatch.grade(task, "Final answer: 1", GradeOptions(), SETTINGS)
    assert (result.outcome, result.reward, result.outcome.scored) == (Outcome.error, 0.0, False)
    with pytest.raises(LookupError):
        queue_of("nobody")
    with pytest.raises(LookupError):
        queue_of("numeric")  # inline: no queue

"""The shape of every verdict. Outcomes separate a wrong answer from a time-out and from a
grader fault, so a trainer can drop unscored items instead of learning from them."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Outcome(StrEnum):
    correct = "correct"
    partial = "partial"  # some required values, rows or cases right
    incorrect = "incorrect"
    no_answer = "no_answer"  # nothing could be extracted
    unit_mismatch = "unit_mismatch"  # a value of the wrong physical dimension
    invalid_request = "invalid_request"
    timeout = "timeout"  # candidate code ran out of time
    memory = "memory"  # candidate code ran out of memory
    sandbox_error = "sandbox_error"  # the sandbox itself failed: never a reward
    judge_error = "judge_error"  # the judge could not be reached or answered nonsense
    error = "error"  # any other grader fault

    @property
    def scored(self) -> bool:
        """False for grader faults: the reward says nothing about the completion."""
        return self not in UNSCORED


UNSCORED = frozenset({Outcome.sandbox_error, Outcome.judge_error, Outcome.error, Outcome.invalid_request})


class ValueVerdict(BaseModel):
    """One required value and what the completion offered for it."""

    expected: str
    expected_si: float
    dimension: str
    extracted: str | None = None
    extracted_si: float | None = None
    relative_error: float | None = None
    correct: bool = False
    reason: str = ""


class GradeResult(BaseModel):
    task_id: str | None = None
    job_id: str | None = None  # set when the grade went through the job store (queued or idempotent)
    split: str | None = None
    grading: str
    outcome: Outcome
    reward: float = Field(ge=0.0, le=1.0)
    explanation: str
    tolerance: float | None = None
    extracted_answer: str | None = None
    values: list[ValueVerdict] = Field(default_factory=list)
    # Kind-specific evidence: per-case verdicts and sandbox tier (impl), judge model and raw
    # verdict (judge), per-row diffs (rows).
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def scored(self) -> bool:
        return self.outcome.scored

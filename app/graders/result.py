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
    judge_error = "judge_error"  # the judge could not be reached (down, time-outs, 5xx): no fault of the answer
    too_long = "too_long"  # the completion is longer than the service grades: scored 0
    no_verdict = "no_verdict"  # the judge gave no verdict even when asked again: scored 0 (the response may cause it)
    error = "error"  # any other grader fault

    @property
    def scored(self) -> bool:
        """False for grader faults: the reward says nothing about the completion."""
        return self not in UNSCORED


UNSCORED = frozenset({Outcome.sandbox_error, Outcome.judge_error, Outcome.error, Outcome.invalid_request})


class ValueVerdict(BaseModel):
    """One required value and what the completion offered for it. ``expected``, ``expected_si``
    and ``relative_error`` are the gold (or follow from it): responses to a task-id grade carry
    them only where the operator turned them on (see ``without_gold``)."""

    expected: str | None = None
    expected_si: float | None = None
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


# Keys of a rows field diff that give the gold away: the expected value itself, and the relative
# error, which together with the candidate's own value yields it.
_GOLD_FIELD_KEYS = ("expected", "relative_error")
# Raw judge text may quote the reference; only the parsed verdict is safe to show.
_GOLD_DETAIL_KEYS = ("judge_reply",)


def without_gold(result: GradeResult) -> GradeResult:
    """A copy of ``result`` with nothing from which the gold follows: a policy that can read its
    grade (a tool call, a client) must not learn the answer from two probes. Verdicts per value,
    per row and per field stay."""
    values = [v.model_copy(update={"expected": None, "expected_si": None, "relative_error": None})
              for v in result.values]
    details = {k: v for k, v in result.details.items() if k not in _GOLD_DETAIL_KEYS}
    diffs = details.get("row_diffs")
    if isinstance(diffs, list):
        details["row_diffs"] = [_row_without_gold(d) for d in diffs]
    return result.model_copy(update={"values": values, "details": details})


def _row_without_gold(diff: Any) -> Any:
    if not isinstance(diff, dict) or not isinstance(diff.get("fields"), dict):
        return diff
    fields = {name: {k: v for k, v in f.items() if k not in _GOLD_FIELD_KEYS} if isinstance(f, dict) else f
              for name, f in diff["fields"].items()}
    return {**diff, "fields": fields}


def shown_result(result: GradeResult, reveal: bool) -> GradeResult:
    """What a client may see of a result: everything for an inline reference (the client sent the
    gold) or when the operator reveals it, else the result without gold."""
    if reveal or result.task_id is None:
        return result
    return without_gold(result)

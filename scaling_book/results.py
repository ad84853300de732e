"""A verdict as the service returns it, without the service's own models (this package needs
only httpx): the JSON fields as attributes, and ``scored``, which says whether the reward may be
trusted (False for grader faults and unusable requests)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Outcomes whose reward says nothing about the completion (the service's Outcome.scored).
UNSCORED_OUTCOMES = frozenset({"sandbox_error", "judge_error", "error", "invalid_request"})


@dataclass
class GradeResult:
    grading: str
    outcome: str
    reward: float
    explanation: str = ""
    task_id: str | None = None
    job_id: str | None = None
    split: str | None = None
    tolerance: float | None = None
    extracted_answer: str | None = None
    values: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        return self.outcome not in UNSCORED_OUTCOMES

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"

    @classmethod
    def from_json(cls, body: Any) -> GradeResult:
        """From a decoded grade response (unknown fields, added by newer services, are kept in
        ``details`` rather than refused)."""
        known = {k: body[k] for k in cls.__dataclass_fields__ if k in body}
        result = cls(**known)
        extra = {k: v for k, v in body.items() if k not in cls.__dataclass_fields__}
        if extra:
            result.details = {**result.details, **extra}
        return result

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def unscored(explanation: str, reason: str = "fault") -> GradeResult:
    """A result standing in for a verdict that could not be had."""
    return GradeResult(grading="unknown", outcome="error", reward=0.0, explanation=explanation[:300],
                       details={"unscored": reason})


class JudgeUnavailable(RuntimeError):
    """Judge-graded items met a service without a usable judge."""


def require_judges(results: list[GradeResult]) -> list[GradeResult]:
    """The results, unless some item was judge-graded with no judge to ask: a trainer that can
    only take a number (verl) would learn 0.0 for every such item, so that is a configuration
    error to fix, not a reward."""
    missing = [r for r in results if r.details.get("unscored") == "no_judge"]
    if missing:
        raise JudgeUnavailable(f"{len(missing)} of {len(results)} items are judge-graded and no judge is usable "
                               f"({missing[0].explanation}); name one (judge=...) or configure the service's judge")
    return results

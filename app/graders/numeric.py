"""Numeric grading: every required value must be matched, within a relative tolerance, by a
value of the same physical dimension in the committed answer.

Matching is positional within a dimension: the k-th required time is compared with the k-th
time the answer states (a quantity with two readings, such as "70.6B", takes part in both
dimensions, answering one value at most). Extra values earn nothing, and listing many candidates cannot help,
because only the first of each dimension is compared."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.graders.extract import extract_answer
from app.graders.result import GradeResult, Outcome, ValueVerdict
from app.quantities import Quantity, find_quantities, parse_quantity
from app.tasks.splits import tolerance_for

if TYPE_CHECKING:
    from app.graders.options import GradeOptions
    from app.settings import Settings
    from app.tasks.base import Task


def relative_error(value: float, gold: float) -> float:
    if gold == 0.0:
        return abs(value)
    return abs(value - gold) / abs(gold)


def within(value: float, gold: float, tolerance: float) -> bool:
    """Finite and within the relative tolerance (absolute when the gold is zero)."""
    return error_within(relative_error(value, gold), tolerance)


def error_within(err: float, tolerance: float) -> bool:
    """``within`` for an error already computed."""
    return math.isfinite(err) and err <= tolerance


def match_values(
    gold: Sequence[Quantity], offered: Sequence[Quantity], *, tolerance: float
) -> list[ValueVerdict]:
    # A quantity with two readings ("70.6B": bytes or billions) is a candidate in both
    # dimensions, but each stated quantity answers at most one required value.
    used: set[int] = set()
    verdicts = []
    for g in gold:
        pick = next(
            ((i, v) for i, q in enumerate(offered) if i not in used and (v := q.reading(g.dimension)) is not None),
            None,
        )
        if pick is not None:
            i, value = pick
            used.add(i)
            q = offered[i]
            err = relative_error(value, g.value)
            ok = error_within(err, tolerance)
            verdict = ValueVerdict(
                expected=g.text, expected_si=g.value, dimension=g.dimension, extracted=q.text,
                extracted_si=value, relative_error=err if math.isfinite(err) else None, correct=ok,
                reason="within tolerance" if ok else "outside tolerance",
            )
        else:
            if offered:
                dims = ", ".join(sorted({q.dimension for q in offered}))
                reason = f"no value of dimension {g.dimension} in the answer (found {dims})"
            else:
                reason = "no value in the answer"
            verdict = ValueVerdict(expected=g.text, expected_si=g.value, dimension=g.dimension, reason=reason)
        verdicts.append(verdict)
    return verdicts


def grade_numeric(gold: Sequence[str | float], completion: str, *, tolerance: float) -> GradeResult:
    """Grade a completion against required values written as quantity text ("3.35 TB/s")."""
    gold_q = [parse_quantity(g) for g in gold]
    extraction = extract_answer(completion)
    offered = find_quantities(extraction.text) if extraction else []
    verdicts = match_values(gold_q, offered, tolerance=tolerance)
    n_right = sum(v.correct for v in verdicts)
    if extraction is None:
        outcome, why = Outcome.no_answer, "no 'Final answer:' line or \\boxed{} found"
    elif not offered:
        outcome, why = Outcome.no_answer, "the final answer holds no number"
    elif n_right == len(verdicts):
        outcome, why = Outcome.correct, f"all {len(verdicts)} value(s) within {tolerance:g}"
    elif all(v.extracted is None for v in verdicts):
        outcome, why = Outcome.unit_mismatch, "the answer's values have the wrong dimension"
    else:
        outcome = Outcome.incorrect
        why = f"{n_right} of {len(verdicts)} value(s) within {tolerance:g}"
    return GradeResult(
        grading="numeric",
        outcome=outcome,
        reward=1.0 if outcome is Outcome.correct else 0.0,
        explanation=why,
        tolerance=tolerance,
        extracted_answer=extraction.text[:500] if extraction else None,
        values=verdicts,
        details={"answer_source": extraction.source} if extraction else {},
    )


def grade_task(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    tolerance = options.tolerance or task.tolerance or tolerance_for(task.split, settings)
    result = grade_numeric(task.gold, completion, tolerance=tolerance)
    # A task may accept more than one key (the book's printed figure beside the computed one),
    # each at the same tolerance: the reward is earned if any of them matches in full.
    for alternative in task.hidden.get("alternatives") or ():
        if result.outcome is Outcome.correct:
            break
        other = grade_numeric(alternative, completion, tolerance=tolerance)
        if other.outcome is Outcome.correct:
            # Said nowhere which key matched: that would tell a prober which figure is the gold.
            result = other
    return result

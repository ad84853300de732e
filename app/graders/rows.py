"""Rows grading: the answer is a JSON object ``{"rows": [...]}`` compared field by field with the
expected rows.

Rules (see README, section rows):
- floats (gold written with a fraction or exponent) match within a relative tolerance, 1e-9 by
  default, which exists only to absorb the order of multiplications and divisions; integers,
  strings, booleans and null must match exactly; NaN and infinities never match;
- a number must be a JSON number: "682.67" (a string) is a wrong type, as is true for 1;
- the row count and each row's field names must match exactly; the order of fields inside a
  row does not matter (JSON objects are unordered), the order of rows does (rows are a list,
  and every prompt fixes their order); rows that are right but out of order are reported so;
- with ``partial_credit`` the reward is the fraction of rows right (over the larger of the two
  row counts, so padding cannot help); otherwise it is 1 only when every row is right."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.graders.json_answer import find_json_answer
from app.graders.numeric import relative_error, within
from app.graders.result import GradeResult, Outcome
from app.tasks.base import Task

if TYPE_CHECKING:
    from app.graders.options import GradeOptions
    from app.settings import Settings

MAX_ROWS = 1000  # more rows than any reference has: compare no further
_MAX_SHOWN = 200  # characters of a candidate's value echoed in the evidence
_LONGEST_INT_SHOWN = 10**_MAX_SHOWN


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _shown(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # keep the evidence valid JSON
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _LONGEST_INT_SHOWN:
        return str(value)[:_MAX_SHOWN] + "..."
    if isinstance(value, str | list | dict):
        text = value if isinstance(value, str) else json.dumps(value)
        return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
    return value


def compare_value(gold: Any, got: Any, *, tolerance: float) -> str | None:
    """None when ``got`` matches ``gold``, else the reason it does not. A reason never holds a
    number derived from the gold (a relative error and the candidate's value give the gold)."""
    if type(got) is type(gold) and got == gold:  # the common case: an exact match (never NaN)
        return None
    if gold is None or isinstance(gold, bool | str):
        if type(got) is type(gold) and got == gold:
            return None
        if _type_name(got) != _type_name(gold):
            return f"wrong type: expected {_type_name(gold)}, got {_type_name(got)}"
        return "not equal"
    if _type_name(got) != "number":
        return f"wrong type: expected number, got {_type_name(got)}"
    if isinstance(got, float) and math.isnan(got):
        return "NaN never matches"
    if isinstance(got, float) and math.isinf(got):
        return "infinity never matches"
    if isinstance(gold, int):
        return None if got == gold else "integer must match exactly"
    try:
        value = float(got)
    except OverflowError:  # an integer literal beyond float range: wrong, not a grader fault
        return "number out of range"
    if within(value, gold, tolerance):
        return None
    return f"outside the relative tolerance {tolerance:g}"


def _relative_error_of(gold: Any, got: Any) -> float | None:
    """The relative error of a wrong number (evidence for a revealed result), else None."""
    if not isinstance(gold, float) or isinstance(got, bool) or not isinstance(got, int | float):
        return None
    try:
        err = relative_error(float(got), gold)
    except OverflowError:
        return None
    return err if math.isfinite(err) else None


def compare_row(gold: Mapping[str, Any], got: Any, *, tolerance: float) -> dict[str, Any]:
    """Verdict for one row: ok, and what is wrong if not."""
    if not isinstance(got, dict):
        return {"ok": False, "error": f"row is a {_type_name(got)}, not an object"}
    verdict: dict[str, Any] = {"ok": True}
    missing = [k for k in gold if k not in got]
    extra = [k for k in got if k not in gold]
    if missing:
        verdict["missing_fields"] = missing
    if extra:
        verdict["extra_fields"] = extra[:20]
    wrong = {}
    for name, expected in gold.items():
        if name in got:
            reason = compare_value(expected, got[name], tolerance=tolerance)
            if reason is not None:
                wrong[name] = {"expected": expected, "got": _shown(got[name]), "reason": reason}
                err = _relative_error_of(expected, got[name])
                if err is not None:
                    wrong[name]["relative_error"] = err
    if wrong:
        verdict["fields"] = wrong
    verdict["ok"] = not (missing or extra or wrong)
    return verdict


# Row comparisons the order check may spend per expected row: it only explains a wrong answer
# (the reward is already decided), so past this budget it gives up rather than go quadratic.
_ORDER_CHECK_BUDGET_PER_ROW = 4


def _matches_in_another_order(
    gold: Sequence[Mapping[str, Any]], got: Sequence[Any], tolerance: float
) -> bool:
    """True when the candidate rows are the gold rows in another order. Candidates are bucketed by
    the gold's exactly compared fields, so each gold row is compared only with the candidates that
    agree on those; the float fields are then compared within a bounded budget."""
    buckets: dict[tuple[Any, ...], list[int]] = {}
    layouts: dict[tuple[str, ...], None] = {}
    for g in gold:
        layouts.setdefault(tuple(sorted(g)), None)
    for j, row in enumerate(got):
        for names in layouts:
            if (key := _gold_key(row, names)) is not None:
                buckets.setdefault(key, []).append(j)
                break
    budget = _ORDER_CHECK_BUDGET_PER_ROW * len(gold) + 64
    for g in gold:
        names = tuple(sorted(g))
        candidates = buckets.get(_gold_key(g, names) or (), [])
        for position, j in enumerate(candidates):
            budget -= 1
            if budget < 0:
                return False
            if compare_row(g, got[j], tolerance=tolerance)["ok"]:
                del candidates[position]
                break
        else:
            return False
    return True


def _gold_key(row: Mapping[str, Any], names: Sequence[str]) -> tuple[Any, ...] | None:
    """The bucket of a row under a gold layout (its field names): the names, and the values
    compared exactly (strings, booleans, null). Numbers key as "number" alone: an int may match
    a float within the tolerance, so their values cannot go into a hash."""
    if not isinstance(row, dict) or len(row) != len(names) or any(name not in row for name in names):
        return None
    key: list[Any] = [names]
    for name in names:
        value = row[name]
        if isinstance(value, bool) or value is None or isinstance(value, str):
            key.append((type(value).__name__, value))
        elif isinstance(value, int | float):
            key.append(("number",))
        else:
            return None
    return tuple(key)


def grade_rows(
    gold_rows: Sequence[Mapping[str, Any]], completion: str, *, tolerance: float, partial_credit: bool = False
) -> GradeResult:
    """Grade a completion against expected rows (see the module docstring for the rules)."""

    def result(outcome: Outcome, why: str, reward: float = 0.0, **details: Any) -> GradeResult:
        return GradeResult(
            grading="rows",
            outcome=outcome,
            reward=reward,
            explanation=why,
            tolerance=tolerance,
            extracted_answer=extracted,
            details=details,
        )

    extracted: str | None = None
    answer = find_json_answer(completion)
    if answer is None:
        return result(Outcome.no_answer, 'no fenced JSON block and no JSON object with a "rows" key')
    if not answer.ok:
        return result(
            Outcome.no_answer, f"the last fenced JSON block is {answer.error}", answer_source=answer.source
        )
    extracted = json.dumps(answer.value, allow_nan=True)[:500]
    value = answer.value
    if not isinstance(value, dict) or "rows" not in value:
        return result(
            Outcome.no_answer,
            f'the answer is a JSON {_type_name(value)} without a "rows" key',
            answer_source=answer.source,
        )
    got = value["rows"]
    if not isinstance(got, list):
        return result(
            Outcome.no_answer, f'"rows" is a {_type_name(got)}, not a list', answer_source=answer.source
        )
    if len(got) > MAX_ROWS:
        return result(
            Outcome.incorrect,
            f"{len(got)} rows given, {len(gold_rows)} expected",
            answer_source=answer.source,
        )

    verdicts = [compare_row(g, r, tolerance=tolerance) for g, r in zip(gold_rows, got, strict=False)]
    n_right = sum(v["ok"] for v in verdicts)
    details: dict[str, Any] = {
        "answer_source": answer.source,
        "rows_expected": len(gold_rows),
        "rows_given": len(got),
        "rows_right": n_right,
        "row_diffs": [{"row": i, **v} for i, v in enumerate(verdicts) if not v["ok"]],
    }
    if len(got) == len(gold_rows) and n_right == len(gold_rows):
        return result(
            Outcome.correct, f"all {n_right} rows match (floats within {tolerance:g})", 1.0, **details
        )

    if len(got) != len(gold_rows):
        why = f"{len(got)} rows given, {len(gold_rows)} expected; {n_right} of the first rows match"
    elif _matches_in_another_order(gold_rows, got, tolerance):
        details["reordered"] = True
        why = "every row matches, but not in the order the task asks for"
    else:
        why = f"{n_right} of {len(gold_rows)} rows match"
    if partial_credit and n_right:
        reward = n_right / max(len(gold_rows), len(got))
        return result(Outcome.partial, why, reward, **details)
    return result(Outcome.incorrect, why, **details)


def grade_task(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    tolerance = options.tolerance or task.tolerance or settings.tolerances.rows
    return grade_rows(task.gold, completion, tolerance=tolerance, partial_credit=options.partial_credit)

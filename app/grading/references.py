"""Inline references: a grading target passed without a task id, the way trainers carry ground
truth (OpenRLHF labels, verl ground truths). Each becomes an ad-hoc Task for the graders."""

from __future__ import annotations

import json
import math
from typing import Any

from app.errors import ApiError
from app.graders.rows import MAX_ROWS
from app.grading.models import InlineReference
from app.quantities import UNREADABLE, parse_quantity
from app.settings import Settings
from app.tasks.base import Task


class InvalidRowsReference(ValueError):
    """An inline rows reference that cannot be graded against (a client error)."""


def task_from_reference(reference: InlineReference, settings: Settings) -> Task:
    """The Task an inline reference stands for; ApiError 422 when it cannot be graded against."""
    if reference.values is not None:
        for i, value in enumerate(reference.values):
            try:
                quantity = parse_quantity(value)
            except ValueError:
                raise ApiError(422, "invalid_reference", f"reference.values[{i}] is not a single quantity") from None
            if not math.isfinite(quantity.value):  # NaN or overflow ("1e400 s"): no answer could ever match it
                raise ApiError(422, "invalid_reference", f"reference.values[{i}] is not a finite quantity")
            if quantity.dimension == UNREADABLE:  # "1 s^2", a chain of 9 unit words: no answer matches it either
                raise ApiError(422, "invalid_reference", f"reference.values[{i}] has a unit the service cannot read")
        return Task(id="", split="", prompt="", grading="numeric", gold=tuple(reference.values),
                    tolerance=reference.tolerance or settings.tolerances.inline)
    try:
        return reference_task({"rows": reference.rows}, settings)
    except InvalidRowsReference as exc:
        raise ApiError(422, "invalid_reference", str(exc)[:200]) from None


def _check_reference_rows(rows: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(rows, list) or not rows:
        raise InvalidRowsReference('reference "rows" must be a non-empty list')
    if len(rows) > MAX_ROWS:
        raise InvalidRowsReference(f"reference has more than {MAX_ROWS} rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not row:
            raise InvalidRowsReference(f"reference row {i} must be a non-empty object")
        for name, value in row.items():
            if not isinstance(value, str | int | float | bool) and value is not None:
                raise InvalidRowsReference(f"reference row {i} field {name!r}: values must be scalars")
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidRowsReference(f"reference row {i} field {name!r}: numbers must be finite")
    return tuple(dict(row) for row in rows)


def reference_task(reference: Any, settings: Settings) -> Task:
    """An ad-hoc rows task from an inline reference, the way trainers pass labels: the object
    ``{"rows": [...]}`` or its JSON text. Raises InvalidRowsReference (a 4xx) if it is unusable."""
    if isinstance(reference, str):
        try:
            reference = json.loads(reference)
        except ValueError:
            raise InvalidRowsReference("reference is not valid JSON") from None
    if not isinstance(reference, dict) or "rows" not in reference:
        raise InvalidRowsReference('reference must be an object {"rows": [...]}')
    gold = _check_reference_rows(reference["rows"])
    return Task(id="", split="", prompt="", grading="rows", gold=gold, tolerance=settings.tolerances.rows)

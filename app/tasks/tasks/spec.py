"""How a rows task is defined: its question, the numbers it states, the shape of its answer and
the reference solution that computes the expected rows."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from app.tasks.tasks.conventions import CORRECT, Conventions

FieldType = Literal["integer", "number", "string", "boolean"]
Row = dict[str, Any]
Solver = Callable[[Mapping[str, Any], Conventions], list[Row]]

CATEGORIES: dict[str, int] = {"roofline": 7, "flops": 8, "memory": 6, "sharding": 7, "inference": 7}


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    type: FieldType
    doc: str


@dataclass(frozen=True, slots=True)
class TaskSpec:
    number: int
    category: str
    title: str
    chapter: str
    tags: tuple[str, ...]
    question: str  # built from ``params`` with fmt(), so the prompt states exactly what the solver uses
    params: Mapping[str, Any]
    row_order: str  # which rows, in which order
    fields: tuple[FieldSpec, ...]
    solve: Solver
    slips: frozenset[str] = frozenset()  # convention slips that change this task's answer

    @property
    def task_id(self) -> str:
        return f"sc-{self.number:03d}"

    def prompt(self) -> str:
        lines = [self.question.strip(), "", f"Rows: {self.row_order}", "Fields of each row, in this order:"]
        lines += [f"- {f.name} ({f.type}): {f.doc}" for f in self.fields]
        lines += ["", 'Answer with one JSON object {"rows": [...]} in a ```json fenced block.']
        return "\n".join(lines)

    def run(self, conventions: Conventions = CORRECT) -> list[Row]:
        """Execute the reference solution and coerce each field to its declared JSON type."""
        raw = self.solve(self.params, conventions)
        return [self._coerce_row(i, row) for i, row in enumerate(raw)]

    def _coerce_row(self, i: int, row: Row) -> Row:
        names = [f.name for f in self.fields]
        if list(row) != names:
            raise ValueError(f"{self.task_id} row {i}: solver fields {list(row)} != declared {names}")
        return {f.name: _coerce(self.task_id, f, row[f.name]) for f in self.fields}


def _coerce(task_id: str, field: FieldSpec, value: Any) -> Any:
    if field.type == "integer":
        if isinstance(value, bool) or Fraction(value).denominator != 1:
            raise ValueError(f"{task_id}.{field.name}: {value!r} is not an integer")
        return int(value)
    if field.type == "number":
        out = float(value)
        if not math.isfinite(out):
            raise ValueError(f"{task_id}.{field.name}: {value!r} is not finite")
        return out
    if field.type == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"{task_id}.{field.name}: {value!r} is not a boolean")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{task_id}.{field.name}: {value!r} is not a string")
    return value


def fmt(x: int | float | Fraction) -> str:
    """A stated number as the prompt shows it: plain below a million, else scientific without a
    plus sign (1.97e14). The text reads back as exactly the same number."""
    if isinstance(x, Fraction):
        if x.denominator != 1:
            raise ValueError(f"cannot state {x} exactly")
        x = int(x)
    if isinstance(x, int) and abs(x) < 1_000_000:
        return str(x)
    text = f"{x:.15g}"
    if "e" not in text and abs(float(x)) >= 1_000_000:
        text = f"{float(x):.15e}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        if "." in mantissa:
            mantissa = mantissa.rstrip("0").rstrip(".")
        text = f"{mantissa}e{int(exponent)}"
    if Fraction(text) != Fraction(repr(x) if isinstance(x, float) else x):
        raise ValueError(f"{x!r} does not print exactly")
    return text


def fmt_list(xs: Sequence[int | float]) -> str:
    return ", ".join(fmt(x) for x in xs)

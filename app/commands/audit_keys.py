"""Re-derive every numeric key of every finite split from code and list the disagreements.

- book: each numeric item's solution (app/tasks/book/solutions.py) must give the key the bank
  serves, and the book's printed figure must lie within tolerance of it or be accepted beside it;
- exam: each numeric question's oracle, run on the quantities read back out of the served prompt,
  must give the served key;
- tasks (rows): each reference solution, re-executed, must give the rows the bank serves.

The banks audited are the ones the service serves (through the registry, so a stale cache entry
is caught too)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.commands.tasks_verify import grades_correct
from app.quantities import parse_quantity
from app.tasks import registry
from app.tasks.base import Task
from app.tasks.book.annotations import load_annotations
from app.tasks.book.keys import KEY_TOLERANCE
from app.tasks.book.solutions import solve
from app.tasks.exam.bank import NUMERIC_INSTRUCTION, numeric_questions, task_id
from app.tasks.tasks.bank import build_tasks as build_rows_tasks

if TYPE_CHECKING:
    from app.settings import Settings

# Keys are written with 4 (book) or 6 (exam) significant figures: re-derived values must agree
# to well within that rounding.
BOOK_AGREEMENT = 1e-3
EXAM_AGREEMENT = 1e-5


@dataclass(frozen=True, slots=True)
class Disagreement:
    split: str
    task_id: str
    detail: str


@dataclass
class SplitAudit:
    split: str
    keys: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)

    def disagree(self, task_id: str, detail: str) -> None:
        self.disagreements.append(Disagreement(self.split, task_id, detail))


def _close(a: float, b: float, rel: float) -> bool:
    return math.isfinite(a) and abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def audit_book(tasks: Iterable[Task]) -> SplitAudit:
    out = SplitAudit("book")
    annotations = load_annotations()
    for task in tasks:
        if task.grading != "numeric":
            continue
        _, chapter, q = task.id.split("/")
        key = f"{chapter}.{q}"
        out.keys += len(task.gold)
        try:
            computed = solve(key)
        except LookupError:
            out.disagree(task.id, "no solution computes this key")
            continue
        if len(computed) != len(task.gold):
            out.disagree(task.id, f"the solution gives {len(computed)} values, the key has {len(task.gold)}")
            continue
        alternatives = [tuple(a) for a in task.hidden.get("alternatives") or ()]
        printed = tuple(v.value for v in annotations[key].values) if key in annotations else ()
        for i, (gold, value) in enumerate(zip(task.gold, computed, strict=True)):
            served = parse_quantity(gold).value
            if not _close(served, value, BOOK_AGREEMENT):
                out.disagree(task.id, f"value {i + 1}: key {gold!r}, re-derived {value:.6g}")
        for i, (figure, value) in enumerate(zip(printed, computed, strict=False)):
            explained = bool(task.hidden.get("differs"))  # a book slip, said why; not a key
            if not _close(parse_quantity(figure).value, value, KEY_TOLERANCE) and not (
                explained or printed in alternatives
            ):
                out.disagree(task.id, f"value {i + 1}: the book prints {figure!r}, re-derived {value:.6g}, "
                                      "and no note says why the printed figure is not the key")
    return out


def audit_exam(tasks: Iterable[Task]) -> SplitAudit:
    out = SplitAudit("exam")
    questions = {task_id(chapter, q.nnn): q for chapter, q in numeric_questions()}
    for task in tasks:
        if task.grading != "numeric":
            continue
        out.keys += len(task.gold)
        q = questions.get(task.id)
        if q is None:
            out.disagree(task.id, "no oracle computes this key")
            continue
        try:
            args = q.parse_prompt(task.prompt.removesuffix(NUMERIC_INSTRUCTION))
        except ValueError:
            out.disagree(task.id, "the prompt no longer states the oracle's quantities")
            continue
        values = q.oracle(**args)
        values = values if isinstance(values, tuple) else (values,)
        if len(values) != len(task.gold):
            out.disagree(task.id, f"the oracle gives {len(values)} values, the key has {len(task.gold)}")
            continue
        for i, (gold, value) in enumerate(zip(task.gold, values, strict=True)):
            served = parse_quantity(gold).value
            if not _close(served, float(value), EXAM_AGREEMENT):
                out.disagree(task.id, f"value {i + 1}: key {gold!r}, re-derived {float(value):.6g}")
    return out


def audit_rows(tasks: Iterable[Task]) -> SplitAudit:
    out = SplitAudit("tasks")
    rederived = {f"tasks/{rt.task_id}": rt.expected_output["rows"] for rt in build_rows_tasks()}
    for task in tasks:
        out.keys += 1
        rows = rederived.get(task.id)
        if rows is None:
            out.disagree(task.id, "no reference solution computes this key")
        elif not (grades_correct(list(task.gold), rows) and grades_correct(rows, list(task.gold))):
            out.disagree(task.id, "the re-executed reference solution gives other rows than the key")
    return out


AUDITS = {"book": audit_book, "exam": audit_exam, "tasks": audit_rows}


def audit(settings: Settings, splits: Iterable[str] | None = None) -> list[SplitAudit]:
    results = []
    for split in splits or AUDITS:
        bank: Any = registry.get_bank(split, settings)
        results.append(AUDITS[split](bank.tasks()))
    return results

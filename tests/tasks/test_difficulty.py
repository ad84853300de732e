"""Every numeric book and exam item carries a difficulty tag: the steps its solution takes
(app/tasks/difficulty.py), counted from the code that computes the key."""

from __future__ import annotations

import math

import pytest

from app.settings import Settings
from app.tasks import formulas as fm
from app.tasks.difficulty import count_steps, difficulty
from app.tasks.registry import get_bank


@pytest.mark.parametrize("split", ["book", "exam"])
def test_every_numeric_item_has_steps_and_a_difficulty(split: str) -> None:
    tasks = [t for t in get_bank(split, Settings()).tasks() if t.grading == "numeric"]
    assert tasks
    for task in tasks:
        steps = task.meta["steps"]
        assert isinstance(steps, int) and steps >= 1, task.id
        assert task.meta["difficulty"] == difficulty(steps), task.id
    # the tag separates items: a bank of one difficulty would say nothing
    assert {t.meta["difficulty"] for t in tasks} == {"easy", "medium", "hard"}


def test_steps_count_operations_inside_the_shared_formulas() -> None:
    def one_division() -> float:
        return 1.97e14 / 8.1e11

    def through_a_formula() -> float:
        return fm.critical_batch(1.97e14, 8.1e11, 1)

    def more_work() -> float:
        total = fm.critical_batch(1.97e14, 8.1e11, 1) * 2 + 3
        return math.ceil(max(total, 1.0))

    assert count_steps(one_division) == 1
    assert count_steps(through_a_formula) > 1  # the formula's own operations count
    assert count_steps(more_work) == count_steps(through_a_formula) + 4  # *, +, ceil, max


def test_a_difficulty_needs_its_steps() -> None:
    assert [difficulty(n) for n in (1, 3, 4, 8, 9, 30)] == ["easy", "easy", "medium", "medium", "hard", "hard"]


def test_the_book_tags_follow_the_solution() -> None:
    # transformers/q1 counts a whole model; roofline/q5 divides two spec figures
    bank = get_bank("book", Settings())
    assert bank.get("book/transformers/q1").meta["difficulty"] == "hard"
    assert bank.get("book/roofline/q5").meta["difficulty"] == "easy"

"""Every numeric exam answer is recomputed from the numbers stated in its question, by its own
oracle, which must do real arithmetic on them; and every gold answer grades 1.0."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from app.graders.numeric import grade_numeric
from app.quantities import parse_quantity
from app.tasks.exam.bank import NUMERIC_INSTRUCTION, numeric_questions, task_id
from app.tasks.exam.model import NumericQuestion, format_value, placeholders

QUESTIONS = numeric_questions()
IDS = [task_id(ch, q.nnn) for ch, q in QUESTIONS]


class Traced(float):
    """A float that counts the arithmetic performed on it (and on values derived from it)."""

    ops: list[int]

    def __new__(cls, value: float, ops: list[int]) -> Traced:
        obj = super().__new__(cls, value)
        obj.ops = ops
        return obj


def _traced_op(name: str):
    base = getattr(float, name)

    def op(self: Traced, other: Any = None) -> Any:
        unary = other is None and name in ("__neg__", "__pos__", "__abs__")
        result = base(self) if unary else base(self, other)
        if result is NotImplemented:
            return result
        self.ops[0] += 1
        return Traced(result, self.ops) if isinstance(result, float) else result

    return op


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__floordiv__", "__rfloordiv__", "__pow__", "__rpow__", "__mod__", "__neg__"):
    setattr(Traced, _name, _traced_op(_name))


def arithmetic_ops(q: NumericQuestion, values: dict[str, float]) -> int:
    ops = [0]
    q.oracle(**{k: Traced(v, ops) for k, v in values.items()})
    return ops[0]


@pytest.fixture(scope="module")
def tasks_by_id(exam_tasks):
    return {t.id: t for t in exam_tasks}


@pytest.mark.parametrize(("chapter", "q"), QUESTIONS, ids=IDS)
def test_answer_recomputed_from_question_text(chapter, q, tasks_by_id):
    task = tasks_by_id[task_id(chapter, q.nnn)]
    assert task.prompt.endswith(NUMERIC_INSTRUCTION)
    stated = q.parse_prompt(task.prompt.removesuffix(NUMERIC_INSTRUCTION))
    assert set(stated) == set(q.args)  # every oracle argument is stated in the question
    recomputed = q.oracle(**stated)
    recomputed = recomputed if isinstance(recomputed, tuple) else (recomputed,)
    assert len(recomputed) == len(task.gold) == len(q.units)
    for value, unit, gold in zip(recomputed, q.units, task.gold, strict=True):
        expected = parse_quantity(format_value(float(value), unit))
        assert parse_quantity(gold).dimension == expected.dimension
        assert math.isclose(parse_quantity(gold).value, expected.value, rel_tol=1e-5)
        assert math.isfinite(float(value)) and float(value) > 0


@pytest.mark.parametrize(("chapter", "q"), QUESTIONS, ids=IDS)
def test_oracle_arguments_are_exactly_the_stated_quantities(chapter, q):
    import inspect

    params = list(inspect.signature(q.oracle).parameters)
    assert sorted(params) == sorted(set(placeholders(q.template))) == sorted(q.args)
    # each stated quantity appears in the rendered prompt
    assert all("{" + name + "}" in q.template for name in params)


@pytest.mark.parametrize(("chapter", "q"), QUESTIONS, ids=IDS)
def test_no_raw_size_is_hidden_in_the_wording(chapter, q):
    """Byte sizes and similar raw quantities are placeholders, so the oracle receives them."""
    literal = re.sub(r"\{[a-z_]+\}", " ", q.template)
    assert not re.search(r"\b\d+(?:\.\d+)?\s*(?:bytes?|B|GB|TB|s|ms|chips|tokens|layers)\b", literal)


@pytest.mark.parametrize(("chapter", "q"), QUESTIONS, ids=IDS)
def test_oracle_does_at_least_two_arithmetic_operations(chapter, q):
    values = {k: float(v) for k, v in q.args.items()}
    assert arithmetic_ops(q, values) >= 2


@pytest.mark.parametrize(("chapter", "q"), QUESTIONS, ids=IDS)
def test_gold_grades_one_and_a_wrong_value_does_not(chapter, q, tasks_by_id):
    task = tasks_by_id[task_id(chapter, q.nnn)]
    right = grade_numeric(task.gold, "Final answer: " + ", ".join(task.gold), tolerance=0.05)
    assert right.reward == 1.0, right.explanation
    wrong = [format_value(v * 1.3, u) for v, u in zip(q.answer_values(), q.units, strict=True)]
    assert grade_numeric(task.gold, "Final answer: " + ", ".join(wrong), tolerance=0.05).reward == 0.0


def test_tracer_counts_operations():
    ops = [0]
    x = Traced(3.0, ops)
    y = (x * 2 + 1) / 7
    assert ops[0] == 3 and isinstance(y, Traced)
    ops2 = [0]
    assert math.ceil(Traced(2.5, ops2) / 1) == 3 and ops2[0] == 1

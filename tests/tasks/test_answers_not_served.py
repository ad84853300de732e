"""No task serves its own answer: over every finite split, the quantities a prompt states are
compared with the gold, and a task fails when its prompt holds every required value (same
dimension, within the grading tolerance), so that copying from the prompt would earn the reward
without the computation. Judge items fail when the prompt quotes their reference answer; impl
items when a hidden case (its inputs and its result) is written in the prompt.

A task whose golds are all dimensionless and below 10 is not checked: small counts (2, 4, 8)
occur in almost every prompt as inputs and cannot be told from a served answer. A match that is a coincidence, an
input that happens to equal a result the solver must still compute, is listed with its reason."""

from __future__ import annotations

import json
import re

import pytest

from app.graders.numeric import within
from app.quantities import DIMENSIONLESS, Quantity, find_quantities, parse_quantity
from app.settings import Settings
from app.tasks.base import Task
from app.tasks.registry import get_bank
from app.tasks.splits import tolerance_for

FINITE_SPLITS = ("book", "exam", "tasks", "impl")

# task id -> why the matching figure in the prompt is an input, not the answer
COINCIDENCES = {
    "book/applied-inference/q5": "the slice sizes 16, 8 and 4 chips are computed from memory; the prompt's 16, "
                                 "8 and 4 are an HBM size, a head count and mesh sides",
}


def _settings() -> Settings:
    return Settings()


@pytest.fixture(scope="module")
def tasks_by_split() -> dict[str, list[Task]]:
    settings = _settings()
    return {split: list(get_bank(split, settings).tasks()) for split in FINITE_SPLITS}


def served_values(task: Task, tolerance: float) -> list[str] | None:
    """For a numeric task: the prompt figures matching every countable gold value, or None."""
    offered = find_quantities(task.prompt)
    golds = [parse_quantity(g) for g in task.gold]
    if all(g.dimension == DIMENSIONLESS and abs(g.value) < 10 for g in golds):
        return None
    hits: list[str] = []
    for gold in golds:
        match = next((q for q in offered if _same(q, gold, tolerance)), None)
        if match is None:
            return None
        hits.append(match.text)
    return hits


def _same(q: Quantity, gold: Quantity, tolerance: float) -> bool:
    return q.dimension == gold.dimension and within(q.value, gold.value, tolerance)


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list | tuple):
        return [n for v in value for n in _numbers(v)]
    return []


def _significant(numbers: list[float]) -> list[float]:
    return [n for n in numbers if abs(n) >= 10 or n != int(n)]


def _in_prompt(numbers: list[float], prompt: str, rel: float) -> bool:
    stated = [q.value for q in find_quantities(prompt)]
    return all(any(within(s, n, rel) for s in stated) for n in numbers)


def _shingles(text: str, n: int = 8) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_every_finite_split_is_checked(tasks_by_split) -> None:
    assert all(tasks_by_split[s] for s in FINITE_SPLITS)
    kinds = {t.grading for tasks in tasks_by_split.values() for t in tasks}
    assert kinds == {"numeric", "judge", "rows", "impl"}


@pytest.mark.parametrize("split", ["book", "exam"])
def test_no_numeric_prompt_states_its_answer(tasks_by_split, split) -> None:
    settings = _settings()
    served = {}
    for task in tasks_by_split[split]:
        if task.grading != "numeric":
            continue
        hits = served_values(task, task.tolerance or tolerance_for(split, settings))
        if hits is not None and task.id not in COINCIDENCES:
            served[task.id] = (list(task.gold), hits)
    assert served == {}


def test_coincidences_are_still_matches(tasks_by_split) -> None:
    # An entry that no longer matches is stale: remove it rather than let it excuse a future leak.
    settings = _settings()
    by_id = {t.id: t for tasks in tasks_by_split.values() for t in tasks}
    for task_id in COINCIDENCES:
        task = by_id[task_id]
        assert served_values(task, task.tolerance or tolerance_for(task.split, settings)) is not None, task_id


def test_no_rows_prompt_states_its_rows(tasks_by_split) -> None:
    served = []
    for task in tasks_by_split["tasks"]:
        numbers = _significant(_numbers(list(task.gold)))
        if numbers and _in_prompt(numbers, task.prompt, 1e-6):
            served.append(task.id)
    assert served == []


def test_no_judge_prompt_quotes_its_reference(tasks_by_split) -> None:
    quoted = []
    for split in ("book", "exam"):
        for task in tasks_by_split[split]:
            if task.grading != "judge":
                continue
            reference = _shingles(str(task.gold))
            if len(reference) >= 4 and len(reference & _shingles(task.prompt)) > len(reference) // 2:
                quoted.append(task.id)
    assert quoted == []


def test_no_impl_prompt_states_a_hidden_case(tasks_by_split) -> None:
    from app.tasks.impl.exercises import BY_NAME

    served = []
    # Cases are drawn fresh per grade: check a spread of draws, not one fixed table.
    for task in tasks_by_split["impl"]:
        for case in (c for seed in range(20) for c in BY_NAME[task.gold].hidden_cases(seed)):
            numbers = _significant(_numbers(case.args) + _numbers(case.expected))
            if _significant(_numbers(case.expected)) and _in_prompt(numbers, task.prompt, 1e-9):
                served.append((task.id, json.dumps(case.args)[:80]))
    assert served == []


# ---- the check itself can fail ---------------------------------------------------------------------


def _task(prompt: str, gold: tuple[str, ...], grading: str = "numeric") -> Task:
    return Task(id="x/1", split="book", prompt=prompt, grading=grading, gold=gold)  # type: ignore[arg-type]


@pytest.mark.parametrize(("prompt", "gold", "served"), [
    ("For BS=240, this is 1.3TB! The critical batch size will be about 120.", ("240", "120"), True),
    ("so the peak bandwidth is 3.6TB/s.", ("3.6 TB/s",), True),
    ("so the peak bandwidth is 3600 GB/s.", ("3.6 TB/s",), True),  # restated in other units
    ("the bandwidth is 3.6 TB/s per link", ("3.6 s",), False),  # other dimension
    ("BS=240 only", ("240", "120"), False),  # one of two values: the rest must be computed
    ("uses 8 chips and 2 hosts", ("8 chips",), False),  # small counts alone are not checked
    ("uses 8 chips and 2 hosts for 240 tokens", ("8 chips", "240"), True),
    ("a [omitted] batch", ("240",), False),
])
def test_the_check_flags_served_answers(prompt, gold, served) -> None:
    assert (served_values(_task(prompt, gold), 0.05) is not None) is served

"""Prompts test the method: a book item's Assumptions state conventions and data, never the
formula, the solving step or a figure its own solution computes on the way. The check runs each
solution under a profiler (app/tasks/method_check.py) and lists every Assumptions section that
states one of its intermediates or a formula; the list must be empty apart from the data below,
each with the reason it is data and not an intermediate."""

from __future__ import annotations

import pytest

from app.tasks.book import solutions
from app.tasks.book.annotations import load_annotations
from app.tasks.hardware import CHIPS
from app.tasks.method_check import (
    computed_values,
    formula_findings,
    intermediate_findings,
    numbers_in,
)

ANNOTATIONS = load_annotations()
NUMERIC = sorted(k for k, a in ANNOTATIONS.items() if a.grading == "numeric")
# Data every solution may read: the spec tables and the model constants of solutions.py.
DATA = numbers_in(CHIPS) | {n for name, v in vars(solutions).items() if name.isupper() for n in numbers_in(v)}

# (item, figure) -> why the figure is data, not an intermediate of the solution
STATED_AS_DATA = {
    ("tpus.q6", "17.18e9"): "the array's size in bytes, 128 x 1024 squared int8 elements: data the "
                            "question gives as a shape, stated exactly because the book rounds it to 16 GB",
    ("applied-training.q5", "70e9 parameters"): "LLaMA 3-70B's parameter count, the question's data "
                                                "(a helper of the solution returns it, so the profiler sees it)",
}


def _assumptions(key: str) -> str:
    return ANNOTATIONS[key].assume or ""


def _findings(key: str) -> list[tuple[str, str]]:
    text = _assumptions(key)
    intermediates, _ = computed_values(solutions.SOLUTIONS[key], DATA)
    found = formula_findings(text) + intermediate_findings(text, intermediates)
    return [(f.kind, f.text) for f in found if (key, f.text.strip("() ")) not in STATED_AS_DATA]


def test_no_assumptions_give_the_method_away() -> None:
    leaks = {key: found for key in NUMERIC if (found := _findings(key))}
    assert leaks == {}


def test_the_data_exceptions_are_still_stated() -> None:
    for key, figure in STATED_AS_DATA:
        assert figure in _assumptions(key), (key, figure)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Count L(3DF + 4DNH + D) + 2DV.", "formula"),
        ("The attention fraction compares 4DNH with 4DNH + 3DF.", "formula"),
        ("write each stage's time as T = B / W", "formula"),
        ("These stages overlap perfectly, so the slowest one sets the time.", "method"),
        ("the MLP part takes the larger of its weight-loading time and its compute time", "method"),
        ("the batch-64 matmul is bandwidth-bound", "method"),
        ("so loading the weights dominates the traffic", "method"),
        ("Each GPU sends (N - 1)/N of the array", "method"),
    ],
)
def test_the_check_finds_formulas_and_method_phrases(text: str, kind: str) -> None:
    assert kind in {f.kind for f in formula_findings(text)}


@pytest.mark.parametrize(
    "text",
    ["Each layer has a gated MLP (three D x F matrices)", "a TPU v5e does 1.97e14 bf16 FLOP/s and 8.1e11 TB/s",
     "bf16 checkpoints of shapes [B, F] and [B, D]", "leave out the (N - 1)/N factor of a ring"],
)
def test_conventions_and_data_are_not_findings(text: str) -> None:
    assert formula_findings(text) == []


def test_the_check_finds_an_intermediate() -> None:
    # applied-inference/q8 once stated the batch (140) its solution computes on the way
    intermediates, finals = computed_values(solutions.SOLUTIONS["applied-inference.q8"], DATA)
    assert any(abs(v - 138) < 1 for v in intermediates) and not finals & intermediates
    assert [f.kind for f in intermediate_findings("the batch is 138 sequences", intermediates)] == ["intermediate"]

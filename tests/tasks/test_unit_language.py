"""One unit language across splits: a ratio or a rate (FLOPs per byte, queries per second) is a
quantity with a unit in every split's keys, graded the same way everywhere. The documented rule
(docs/splits.md): any spelling of the unit is accepted (OPs/byte, FLOPs/B, QPS, queries/s...);
a bare number where the key has a unit is a unit mismatch, on every split alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.graders.dispatch import grade
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.quantities import DIMENSIONLESS, parse_quantity
from app.settings import Settings
from app.tasks.book.bank import parse_bank
from app.tasks.exam.bank import build_tasks
from app.tasks.synthetic.bank import SyntheticBank
from tests.support.book_mirror import mirror_path

INTENSITY = "[operation] / [information]"
RATE = "1 / [time]"


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(book_mirror=mirror_path(), book_cache=tmp_path_factory.mktemp("units-cache"))


@pytest.fixture(scope="module")
def tasks(settings: Settings) -> dict[str, object]:
    out = {t.id: t for t in parse_bank(settings).tasks()}
    out |= {t.id: t for t in build_tasks(settings)}
    synthetic = SyntheticBank()
    out |= {t.id: t for seed in range(3) for t in synthetic.batch(seed=seed, n=48)}
    return out


def _outcome(task, completion: str) -> Outcome:
    return grade(task, completion, GradeOptions(), Settings()).outcome


def _synthetic_intensity(tasks):
    return next(t for t in tasks.values() if t.meta.get("family") == "arithmetic_intensity")


CROSS_SPLIT = [
    ("book/roofline/q4", "Final answer: 2 OPs/byte", Outcome.correct),
    ("book/roofline/q4", "Final answer: 2 FLOPs per byte", Outcome.correct),
    ("book/roofline/q4", "Final answer: 2", Outcome.unit_mismatch),
    ("exam/applied-inference/005", "Final answer: 0.276 QPS", Outcome.correct),
    ("exam/applied-inference/005", "Final answer: 0.276 queries per second", Outcome.correct),
    ("exam/applied-inference/005", "Final answer: 0.276", Outcome.unit_mismatch),
    ("book/applied-inference/q7", "Final answer: 0.276 QPS, 0.55 QPS, 1.1 QPS", Outcome.correct),
    ("book/applied-inference/q7", "Final answer: 0.276, 0.55, 1.1", Outcome.unit_mismatch),
    ("book/gpus/q3", "Final answer: 295 FLOPs/B, 281 FLOPs/B, 590 FLOPs/B, 562 FLOPs/B", Outcome.correct),
]


@pytest.mark.parametrize(("task_id", "completion", "outcome"), CROSS_SPLIT)
def test_ratios_and_rates_grade_alike_across_splits(tasks, task_id: str, completion: str, outcome) -> None:
    assert _outcome(tasks[task_id], completion) is outcome


def test_synthetic_intensity_follows_the_same_rule(tasks) -> None:
    task = _synthetic_intensity(tasks)
    value = parse_quantity(task.gold[0]).value
    assert _outcome(task, f"Final answer: {value:.6g} OPs/byte") is Outcome.correct
    assert _outcome(task, f"Final answer: {value:.6g}") is Outcome.unit_mismatch


def test_exam_intensity_follows_the_same_rule(tasks) -> None:
    task = tasks["exam/roofline/002"]
    value = parse_quantity(task.gold[0]).value
    assert parse_quantity(task.gold[0]).dimension == INTENSITY
    assert _outcome(task, f"Final answer: {value:.6g} OPs/byte") is Outcome.correct
    assert _outcome(task, f"Final answer: {value:.6g}") is Outcome.unit_mismatch


def test_no_key_in_any_split_states_a_ratio_or_rate_as_a_bare_number(tasks) -> None:
    """Where a prompt asks for FLOPs (or OPs) per byte, or queries per second, the key carries
    that unit: no split keeps a bare-number key for such a quantity."""
    checked: set[str] = set()
    for task in tasks.values():
        if task.grading != "numeric":
            continue
        dims = [parse_quantity(g).dimension for g in task.gold]
        text = (task.meta.get("ask") or task.prompt).lower()
        if re.search(r"(what|give|the)[^.?]*intensity[^.?]*(\?|per byte|flops/byte)", text):
            assert INTENSITY in dims, task.id
            checked.add(task.split)
        if re.search(r"(how many|throughput in) queries per second", text):
            assert RATE in dims, task.id
            checked.add(task.split)
        if "as a plain number" in text:
            assert dims.count(DIMENSIONLESS) >= 1, task.id
    assert checked == {"book", "exam", "synthetic"}


def test_the_rule_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "splits.md").read_text(encoding="utf-8")
    assert "unit mismatch" in doc and "QPS" in doc and "OPs/byte" in doc

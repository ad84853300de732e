"""Annotations against the source: every numeric item's own reference values grade 1.0 through
the numeric grader, each value is backed by a figure in the source answer, and every task is
tagged with its chapter and key-content items."""

from __future__ import annotations

import pytest

from app.graders.dispatch import grade
from app.graders.numeric import relative_error
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.quantities import find_quantities, parse_quantity
from app.settings import Settings
from app.tasks.book.annotations import load_annotations
from app.tasks.book.bank import _split_answer
from app.tasks.book.parser import parse_chapter
from app.tasks.key_content import item_ids, key_content

ANNOTATIONS = load_annotations()
NUMERIC = sorted(k for k, a in ANNOTATIONS.items() if a.grading == "numeric")


def _answer_text(chapters, key: str) -> str:
    chapter, q = key.split(".")
    parsed = parse_chapter(chapter, chapters[chapter].text)[int(q[1:]) - 1]
    parsed = _split_answer(key, parsed, chapters[chapter].text, ANNOTATIONS[key])
    assert parsed.answer is not None, key
    return parsed.answer.text(chapters[chapter].text)


class TestReferenceAnswersGradeCorrect:
    @pytest.mark.parametrize("key", NUMERIC)
    def test_reference_values_as_a_completion_score_one(self, bank, key: str) -> None:
        chapter, q = key.split(".")
        task = bank.get(f"book/{chapter}/{q}")
        completion = "Working omitted.\nFinal answer: " + ", ".join(task.gold)
        result = grade(task, completion, GradeOptions(), Settings())
        assert result.outcome is Outcome.correct, result.explanation
        assert result.reward == 1.0

    @pytest.mark.parametrize("key", NUMERIC)
    def test_values_off_by_half_score_zero(self, bank, key: str) -> None:
        """The converse: the grader is really comparing, so halving every figure fails."""
        chapter, q = key.split(".")
        task = bank.get(f"book/{chapter}/{q}")
        halved = []
        for value in task.gold:
            qty = parse_quantity(value)
            unit = value[len(qty.text.split()[0]):] if " " in qty.text else ""
            number = float(qty.text.split()[0].replace(",", "").rstrip("%")) / 2
            halved.append(f"{number:g}{'%' if value.endswith('%') else unit}")
        result = grade(task, "Final answer: " + ", ".join(halved), GradeOptions(), Settings())
        assert result.reward == 0.0, (halved, result.explanation)


class TestFiguresComeFromTheSource:
    @pytest.mark.parametrize("key", NUMERIC)
    def test_each_figure_occurs_in_the_answer_and_matches_its_value(self, chapters, key: str) -> None:
        answer = _answer_text(chapters, key)
        ann = ANNOTATIONS[key]
        tolerance = 0.05
        for v in ann.values:
            assert v.figure in answer, (key, v.figure)
            if v.derived:
                continue
            gold = parse_quantity(v.value)
            found = find_quantities(v.figure)
            # A bare figure ("4.2e11") stands for the value in base units.
            assert any(relative_error(q.value, gold.value) <= tolerance for q in found), (key, v, found)


class TestTagsAndKinds:
    def test_every_task_has_its_chapter_and_known_items(self, bank) -> None:
        known = item_ids()
        for task in bank.tasks():
            assert task.chapter in key_content()
            assert task.id.startswith(f"book/{task.chapter}/q")
            assert task.tags and set(task.tags) <= known, task.id

    def test_kinds_are_numeric_or_judge(self, bank) -> None:
        kinds = {t.grading for t in bank.tasks()}
        assert kinds == {"numeric", "judge"}
        for t in bank.tasks():
            if t.grading == "judge":
                assert isinstance(t.gold, str) and len(t.gold) > 40
                assert t.hidden["reference"] == t.gold

    def test_every_answered_question_is_annotated_once(self, chapters) -> None:
        answered = {
            f"{name}.q{q.index}"
            for name, c in chapters.items()
            for q in parse_chapter(name, c.text)
            if q.answered
        }
        # Questions answered by the text that follows them are annotated with where it starts.
        followed = {k for k, a in ANNOTATIONS.items() if a.answer_starts}
        assert followed and not followed & answered
        assert answered | followed == set(ANNOTATIONS)

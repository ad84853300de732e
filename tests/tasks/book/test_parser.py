"""Question markers, answers and exclusions per chapter, checked against an independent
line-by-line count of the source and against the figures read off the pinned chapters."""

from __future__ import annotations

import re

import pytest

from app.tasks.book.parser import NO_ANSWER, parse_chapter
from app.tasks.book.source import CHAPTERS

# (markers, answered, unanswered) per chapter, read off the pinned source by hand.
EXPECTED = {
    "roofline": (5, 5, 0),
    "tpus": (7, 7, 0),
    "sharding": (13, 11, 2),
    "transformers": (8, 8, 0),
    "training": (3, 3, 0),
    "applied-training": (11, 8, 3),
    "inference": (8, 6, 2),
    "applied-inference": (15, 12, 3),
    "profiling": (2, 1, 1),
    "jax-stuff": (4, 2, 2),
    "gpus": (23, 23, 0),
}

_LABELS = ("Question", "Problem", "Pop Quiz")


def _is_marker(line: str) -> bool:
    """A deliberately simple, separate reading of 'a line that opens a question'."""
    if line.startswith("**"):
        return any(line[2:].startswith(label) for label in _LABELS)
    if line.startswith("<b"):
        head = line.split("</b>", 1)[0]
        return any(f">{label}" in head for label in _LABELS)
    return False


def grep_count(text: str) -> tuple[int, int]:
    """(markers, answered): a marker is answered when a line opening a details block comes
    before the next marker or heading."""
    lines = text.split("\n")
    markers = answered = 0
    for i, line in enumerate(lines):
        if not _is_marker(line):
            continue
        markers += 1
        for nxt in lines[i + 1 :]:
            if _is_marker(nxt) or nxt.startswith("#") or nxt.startswith("<h"):
                break
            if nxt.startswith("{% details"):
                answered += 1
                break
    return markers, answered


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_counts_match_an_independent_scan(chapters, chapter: str) -> None:
    text = chapters[chapter].text
    parsed = parse_chapter(chapter, text)
    markers, answered = grep_count(text)
    assert len(parsed) == markers
    assert sum(q.answered for q in parsed) == answered
    assert (len(parsed), answered, markers - answered) == EXPECTED[chapter]


def test_the_scan_sees_every_marker_form(chapters) -> None:
    """The forms the issue lists all occur, so the counts above exercise each of them."""
    everything = "\n".join(c.text for c in chapters.values())
    forms = {
        "numbered with title, colon inside": r"^\*\*Question \d+ \[[^\]]+\]:\*\*",
        "numbered with title, colon outside": r"^\*\*Question \d+ \[[^\]]+\]\*\*:",
        "bare": r"^\*\*Question:\*\*",
        "numbered, colon outside": r"^\*\*Question \d+\*\*:",
        "problem": r"^\*\*Problem \d+:\*\*",
        "title after colon": r"^\*\*Question \d+: [^*]+:\*\*",
        "pop quiz in bold": r"^\*\*Pop Quiz",
        "pop quiz in coloured html": r"^<b [^>]*>Pop Quiz",
    }
    for name, pattern in forms.items():
        assert re.search(pattern, everything, re.MULTILINE), name


def test_answers_exclude_the_liquid_tags_and_questions_exclude_answers(chapters) -> None:
    for name, chapter in chapters.items():
        for q in parse_chapter(name, chapter.text):
            question = q.question.text(chapter.text)
            assert "{% details" not in question and "{% enddetails" not in question
            if q.answer is not None:
                answer = q.answer.text(chapter.text)
                assert "{% details" not in answer and "{% enddetails" not in answer
                assert q.question.end <= q.answer.start
            else:
                assert q.exclusion == NO_ANSWER


def test_indices_are_positions_and_labels_read_from_the_marker(chapters) -> None:
    parsed = parse_chapter("sharding", chapters["sharding"].text)
    assert [q.index for q in parsed] == list(range(1, len(parsed) + 1))
    assert [q.label for q in parsed][:4] == ["Pop Quiz", "Pop Quiz", "Pop Quiz 2", "Question 1"]
    tenth = next(q for q in parsed if q.label == "Question 10")
    assert tenth.title == "Fun with AllToAll"


def test_parsing_twice_gives_the_same_spans(chapters) -> None:
    for name, chapter in chapters.items():
        assert parse_chapter(name, chapter.text) == parse_chapter(name, chapter.text)


SYNTHETIC = """## Section A

Some text.

```py
# a comment, not a heading
x = 1
```

**Question 1 [first]:** What is x?

{% details Click. %}

It is 1. ```inline one-line fence```

{% enddetails %}

**Pop Quiz:** No answer here.

# Next chapter part

{% details Unrelated block after a heading %}
not an answer
{% enddetails %}
"""


def test_code_comments_are_not_headings_and_answers_stop_at_headings() -> None:
    first, second = parse_chapter("x", SYNTHETIC)
    assert first.section == "Section A" and first.title == "first"
    assert first.answer is not None and "It is 1." in first.answer.text(SYNTHETIC)
    assert second.label == "Pop Quiz" and second.answer is None
    assert "Unrelated" not in second.question.text(SYNTHETIC)

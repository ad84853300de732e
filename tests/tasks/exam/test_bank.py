"""The exam bank's shape: size, spread over chapters and key-content items, ids, locators
resolved from the verified book, what clients may see, and originality of the wording."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from app.settings import Settings
from app.tasks.base import UnknownTask
from app.tasks.book.source import CHAPTER_DIGESTS, BookSourceError
from app.tasks.exam.bank import (
    concept_questions,
    key_content,
    load_bank,
    resolve_locator,
    summary,
    summary_markdown,
)
from app.tasks.exam.source import chapter_text

CONCEPTS = concept_questions()


def test_bank_size_and_kinds(exam_tasks):
    kinds = Counter(t.grading for t in exam_tasks)
    assert len(exam_tasks) >= 121
    assert kinds["numeric"] >= 71
    assert kinds["judge"] >= 50
    assert set(kinds) == {"numeric", "judge"}


def test_every_chapter_has_both_kinds(exam_tasks):
    per_chapter = Counter((t.chapter, t.grading) for t in exam_tasks)
    for chapter in key_content():
        assert per_chapter[(chapter, "numeric")] >= 1, chapter
        assert per_chapter[(chapter, "judge")] >= 1, chapter


def test_every_key_content_item_is_covered(exam_tasks):
    coverage = summary(exam_tasks)["coverage"]
    known = {i for ids in key_content().values() for i in ids}
    assert set(coverage) == known
    assert [item for item, ids in coverage.items() if not ids] == []


def test_ids_and_tags(exam_tasks):
    known = {i for ids in key_content().values() for i in ids}
    for t in exam_tasks:
        m = re.fullmatch(r"exam/([a-z-]+)/(\d{3})", t.id)
        assert m and m.group(1) == t.chapter, t.id
        assert t.split == "exam"
        assert t.tags and set(t.tags) <= known, t.id
    assert len({t.id for t in exam_tasks}) == len(exam_tasks)


def test_public_view_hides_answers(exam_tasks):
    for t in exam_tasks:
        view = t.public()
        assert "gold" not in view and "hidden" not in view
        text = str(view)
        if t.grading == "judge":
            assert t.gold not in text
            assert t.hidden["context"] not in text
        else:
            for value in t.gold:
                assert value not in text, (t.id, value)
            assert "oracle" not in view["meta"]


@pytest.mark.parametrize(("chapter", "q"), CONCEPTS, ids=[f"{c}/{q.nnn:03d}" for c, q in CONCEPTS])
def test_locator_hash_matches_verified_source(chapter, q, exam_settings):
    text = chapter_text(exam_settings, q.locator.chapter)
    span = text[q.locator.start : q.locator.end]
    assert hashlib.sha256(span.encode()).hexdigest() == q.locator.sha256
    assert resolve_locator(exam_settings, q.locator) == span
    assert len(span) >= 80  # a passage, not a heading
    assert q.rationale.strip() and q.reference.strip() and q.locator.chapter == chapter


def test_judge_tasks_carry_the_resolved_passage(exam_tasks, exam_settings):
    for t in exam_tasks:
        if t.grading != "judge":
            continue
        assert "source" not in t.meta  # the locator names the answer's passage: never public
        src = t.hidden["source"]
        text = chapter_text(exam_settings, src["chapter"])
        assert t.hidden["context"] == text[src["start"] : src["end"]]
        assert t.hidden["rationale"]


def test_a_tampered_locator_is_fatal(exam_settings):
    q = CONCEPTS[0][1]
    with pytest.raises(BookSourceError):
        resolve_locator(exam_settings, replace(q.locator, end=q.locator.end + 1))
    with pytest.raises(BookSourceError):
        resolve_locator(exam_settings, replace(q.locator, start=10**9, end=10**9 + 5))


def test_a_tampered_mirror_is_refused(book_mirror: Path, tmp_path: Path):
    mirror = tmp_path / "mirror"
    shutil.copytree(book_mirror, mirror)
    path = mirror / "roofline.md"
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(b"roofline", b"roofl1ne", 1))
    settings = Settings(book_mirror=mirror, book_cache=tmp_path / "cache")
    with pytest.raises(BookSourceError, match=r"expected .* refusing to use it"):
        load_bank(settings)


def test_no_book_source_is_a_clear_error(tmp_path: Path):
    settings = Settings(book_mirror=tmp_path / "nowhere", book_cache=tmp_path / "cache")
    with pytest.raises(BookSourceError, match="missing from mirror"):
        load_bank(settings)


def test_pinned_digests_match_the_mirror_sums(book_mirror: Path):
    sums = dict(reversed(line.split()) for line in (book_mirror / "SHA256SUMS").read_text().splitlines())
    for chapter, digest in CHAPTER_DIGESTS.items():
        assert sums[f"{chapter}.md"] == digest


def test_batches_filter_by_chapter_and_are_seeded(exam_settings):
    bank = load_bank(exam_settings)
    batch = bank.batch(seed=3, n=100, chapters=["sharding"])
    assert batch and {t.chapter for t in batch} == {"sharding"}
    assert [t.id for t in batch] == [t.id for t in bank.batch(seed=3, n=100, chapters=["sharding"])]
    assert [t.id for t in bank.batch(seed=3, n=20)] != [t.id for t in bank.batch(seed=4, n=20)]
    assert bank.get("exam/sharding/002").grading == "numeric"
    with pytest.raises(UnknownTask):
        bank.get("exam/sharding/999")
    info = bank.info()
    assert info["size"] == len(bank.tasks()) and info["chapters"]["sharding"] == len(batch)


def _shingles(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_wording_is_original(exam_tasks, exam_settings):
    """No question, reference or rationale repeats 7 consecutive words of the book."""
    book: set[tuple[str, ...]] = set()
    for chapter in key_content():
        book |= _shingles(chapter_text(exam_settings, chapter), 7)
    copied = []
    for t in exam_tasks:
        texts = [t.prompt] + ([t.gold, t.hidden["rationale"]] if t.grading == "judge" else [])
        for text in texts:
            overlap = _shingles(text, 7) & book
            if overlap:
                copied.append((t.id, " ".join(sorted(overlap)[0])))
    assert copied == []


def test_summary_table_counts(exam_tasks):
    table = summary_markdown(exam_tasks)
    total = re.search(r"\| \*\*all\*\* \| (\d+) \| (\d+) \| (\d+) \|", table)
    assert total is not None
    kinds = Counter(t.grading for t in exam_tasks)
    assert (int(total.group(1)), int(total.group(2)), int(total.group(3))) == (
        kinds["numeric"], kinds["judge"], len(exam_tasks))
    n = len({i for ids in key_content().values() for i in ids})
    assert f"Key-content items covered: {n} of {n}" in table and n == 58


def test_no_book_text_in_committed_exam_files(exam_settings):
    """Every file of the exam package (questions, oracles, concepts.toml) is free of 10-word runs of
    the book: passages are referred to by locator only."""
    book: set[tuple[str, ...]] = set()
    for chapter in key_content():
        book |= _shingles(chapter_text(exam_settings, chapter), 10)
    package = Path(__file__).resolve().parents[3] / "app" / "tasks" / "exam"
    files = [p for p in package.rglob("*") if p.suffix in (".py", ".toml", ".md")]
    assert len(files) > 10
    leaks = [(p.name, " ".join(sorted(o)[0])) for p in files if (o := _shingles(p.read_text(), 10) & book)]
    assert leaks == []

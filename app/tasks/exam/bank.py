"""Load the exam split: numeric questions (oracle-computed answers) and conceptual questions
(judged against a reference, with the justifying book passage resolved from the verified source)."""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.tasks.base import FiniteBank, Task
from app.tasks.book.source import BookSourceError
from app.tasks.difficulty import difficulty_tags
from app.tasks.exam.model import ConceptQuestion, Locator, NumericQuestion
from app.tasks.exam.numeric import CHAPTER_QUESTIONS
from app.tasks.exam.source import chapter_text

if TYPE_CHECKING:
    from app.settings import Settings

SPLIT = "exam"
CONCEPTS_FILE = Path(__file__).with_name("concepts.toml")
KEY_CONTENT_FILE = Path(__file__).parents[1] / "key_content.toml"

NUMERIC_INSTRUCTION = (
    "\n\nWork it out, then end with a line of the form 'Final answer: <value> <unit>'"
    " (several values in the order asked, each with its unit)."
)
CONCEPT_INSTRUCTION = "\n\nAnswer in a few sentences."


def task_id(chapter: str, nnn: int) -> str:
    return f"{SPLIT}/{chapter}/{nnn:03d}"


@lru_cache(maxsize=1)
def key_content() -> dict[str, list[str]]:
    """chapter -> key-content item ids, from the shared coverage map."""
    data = tomllib.loads(KEY_CONTENT_FILE.read_text(encoding="utf-8"))
    return {chapter: [item["id"] for item in section["items"]] for chapter, section in data.items()}


def numeric_questions() -> list[tuple[str, NumericQuestion]]:
    return [(chapter, q) for chapter, questions in CHAPTER_QUESTIONS.items() for q in questions]


def concept_questions() -> list[tuple[str, ConceptQuestion]]:
    data = tomllib.loads(CONCEPTS_FILE.read_text(encoding="utf-8"))
    out = []
    for entry in data["question"]:
        loc = entry["locator"]
        out.append((entry["chapter"], ConceptQuestion(
            nnn=entry["nnn"],
            items=tuple(entry["items"]),
            prompt=entry["prompt"],
            reference=entry["reference"],
            locator=Locator(entry["chapter"], loc["start"], loc["end"], loc["sha256"]),
            rationale=entry["rationale"],
        )))
    return out


def resolve_locator(settings: Settings, locator: Locator) -> str:
    """The passage a locator names, from the verified chapter; a hash mismatch is fatal."""
    text = chapter_text(settings, locator.chapter)
    if not 0 <= locator.start < locator.end <= len(text):
        raise BookSourceError(f"locator {locator} lies outside chapter {locator.chapter!r}")
    span = text[locator.start : locator.end]
    if hashlib.sha256(span.encode("utf-8")).hexdigest() != locator.sha256:
        raise BookSourceError(f"locator {locator} does not match the verified source")
    return span


def _check_items(chapter: str, items: Iterable[str], where: str) -> None:
    known = key_content()
    if chapter not in known:
        raise ValueError(f"{where}: unknown chapter {chapter!r}")
    all_items = {i for ids in known.values() for i in ids}
    for item in items:
        if item not in all_items:
            raise ValueError(f"{where}: unknown key-content item {item!r}")


def numeric_task(chapter: str, q: NumericQuestion) -> Task:
    tid = task_id(chapter, q.nnn)
    _check_items(chapter, q.items, tid)
    return Task(
        id=tid,
        split=SPLIT,
        prompt=q.prompt() + NUMERIC_INSTRUCTION,
        grading="numeric",
        gold=q.gold(),
        chapter=chapter,
        tags=q.items,
        meta={"family": "exam-numeric", "values": len(q.units), **difficulty_tags(q.oracle)},
        hidden={
            "oracle": f"{q.oracle.__module__}:{q.oracle.__name__}",
            "args": dict(q.args),
        },
    )


def concept_task(chapter: str, q: ConceptQuestion, passage: str) -> Task:
    tid = task_id(chapter, q.nnn)
    _check_items(chapter, q.items, tid)
    loc = q.locator
    return Task(
        id=tid,
        split=SPLIT,
        prompt=q.prompt + CONCEPT_INSTRUCTION,
        grading="judge",
        gold=q.reference,
        chapter=chapter,
        tags=q.items,
        meta={"family": "exam-conceptual"},
        # The passage's locator is private: it names where the reference's answer stands in the book.
        hidden={"question": q.prompt, "context": passage, "rationale": q.rationale,
                "source": {"chapter": loc.chapter, "start": loc.start, "end": loc.end, "sha256": loc.sha256}},
    )


def build_tasks(settings: Settings | None, *, resolve: bool = True) -> list[Task]:
    """Every exam task. resolve=False skips reading the book (counts and summaries only)."""
    tasks = [numeric_task(ch, q) for ch, q in numeric_questions()]
    if resolve and settings is None:
        raise ValueError("resolving locators needs settings")
    tasks += [
        concept_task(ch, q, resolve_locator(settings, q.locator) if resolve and settings else "")
        for ch, q in concept_questions()
    ]
    tasks.sort(key=lambda t: t.id)
    return tasks


def load_bank(settings: Settings) -> FiniteBank:
    return FiniteBank(
        SPLIT,
        "Authored exam over every chapter: numeric questions with oracle-computed answers and "
        "conceptual questions judged against a reference grounded in a book passage",
        build_tasks(settings),
    )


def summary(tasks: Iterable[Task]) -> dict[str, Any]:
    """Counts by chapter and grading kind, and which tasks cover each key-content item."""
    by_chapter: dict[str, dict[str, int]] = {ch: {"numeric": 0, "judge": 0} for ch in key_content()}
    coverage: dict[str, list[str]] = {i: [] for ids in key_content().values() for i in ids}
    for t in tasks:
        by_chapter.setdefault(t.chapter or "", {"numeric": 0, "judge": 0})[t.grading] += 1
        for item in t.tags:
            coverage.setdefault(item, []).append(t.id)
    return {"by_chapter": by_chapter, "coverage": coverage}


def summary_markdown(tasks: Iterable[Task]) -> str:
    tasks = list(tasks)
    s = summary(tasks)
    lines = ["| chapter | numeric | judge | total |", "|---|---:|---:|---:|"]
    for chapter, counts in s["by_chapter"].items():
        lines.append(f"| {chapter} | {counts['numeric']} | {counts['judge']} | "
                     f"{counts['numeric'] + counts['judge']} |")
    n_num = sum(c["numeric"] for c in s["by_chapter"].values())
    n_judge = sum(c["judge"] for c in s["by_chapter"].values())
    lines.append(f"| **all** | {n_num} | {n_judge} | {n_num + n_judge} |")
    covered = sum(1 for ids in s["coverage"].values() if ids)
    lines.append("")
    lines.append(f"Key-content items covered: {covered} of {len(s['coverage'])}; "
                 f"fewest questions on one item: {min(len(v) for v in s['coverage'].values())}.")
    return "\n".join(lines)

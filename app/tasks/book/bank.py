"""The book split: one task per answered worked question of the pinned book.

Loading = verify the source, parse, annotate, render prompts. The result is cached (see
cache.py) under a key naming the source digests, the parser version and the annotations, so a
restart or a second replica loads the cached bank instead of parsing again."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.quantities import find_quantities, parse_quantity
from app.tasks.base import FiniteBank, Task
from app.tasks.book import source
from app.tasks.book.annotations import Annotation, AnnotationError, annotations_digest, load_annotations
from app.tasks.book.cache import BankCache, DiskBankCache, LayeredBankCache, RedisBankCache
from app.tasks.book.hardware_tables import ChipRecord, chip_records, chips_named, table_headers
from app.tasks.book.keys import book_keys, keys_digest
from app.tasks.book.markdown import to_markdown
from app.tasks.book.parser import (
    DETAILS_ANY,
    DETAILS_OPEN,
    PARSER_VERSION,
    ParsedQuestion,
    Span,
    is_fence,
    parse_chapter,
)
from app.tasks.book.solutions import SOLUTIONS
from app.tasks.difficulty import difficulty_tags
from app.tasks.key_content import item_ids, key_content

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)

SPLIT = "book"
DESCRIPTION = "Worked questions of the pinned book, parsed from the verified source; numeric or judge"
# Bounds on the context given with each question (characters, including the source line).
CONTEXT_MIN = 80
CONTEXT_MAX = 6000


@dataclass(frozen=True, slots=True)
class Exclusion:
    id: str
    chapter: str
    label: str
    line: int
    reason: str


class BookBank(FiniteBank):
    def __init__(
        self, tasks: list[Task], exclusions: list[Exclusion], cache_key: str, markers: dict[str, int]
    ) -> None:
        super().__init__(SPLIT, DESCRIPTION, tasks)
        self.exclusions = exclusions
        self.cache_key = cache_key
        self.markers = markers  # chapter -> number of question markers found

    def info(self) -> dict[str, Any]:
        info = super().info()
        info["source"] = {"repository": source.REPOSITORY, "commit": source.COMMIT}
        info["excluded"] = len(self.exclusions)
        return info


def task_id(chapter: str, index: int) -> str:
    return f"{SPLIT}/{chapter}/q{index}"


def cache_key() -> str:
    h = hashlib.sha256()
    for part in (source.source_fingerprint(), PARSER_VERSION, annotations_digest(), keys_digest()):
        h.update(part.encode())
        h.update(b"\0")
    return f"book-{h.hexdigest()[:32]}"


# ---- prompt parts ----------------------------------------------------------------------------


def _locator(chapter: source.Chapter, span: Span) -> dict[str, Any]:
    return {"start": span.start, "end": span.end, "sha256": span.sha256(chapter.text)}


# What stands in a prompt's context for an earlier question's answer block.
ANSWER_NOT_SHOWN = "\n\n*(The book's answer to this question is not shown here.)*\n\n"


def without_answer_blocks(text: str) -> str:
    """``text`` with every answer block (a ``{% details %}`` block, nested ones included) replaced
    by a short note: a prompt gives earlier questions as context, never their answers, since
    another task's gold is usually among them."""
    out, depth, kept_from = [], 0, 0
    for m in DETAILS_ANY.finditer(text):
        if m.group("end") is None:
            if depth == 0:
                out.append(text[kept_from : m.start()])
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                out.append(ANSWER_NOT_SHOWN)
                kept_from = m.end()
    if depth > 0:  # an unclosed block runs to the end of the text: none of it is shown
        out.append(ANSWER_NOT_SHOWN)
    else:
        out.append(text[kept_from:])
    return "".join(out)


def without_spans(text: str, within: Span, spans: list[Span]) -> str:
    """``text[within]`` with each of ``spans`` inside it replaced by the note that an answer is
    not shown: the answers that are no ``{% details %}`` block (a question answered by the text
    that follows it, see ``_split_answer``), which ``without_answer_blocks`` cannot see."""
    out, at = [], within.start
    for span in sorted(spans, key=lambda s: s.start):
        start, end = max(span.start, within.start), min(span.end, within.end)
        if start >= end or start < at:
            continue
        out += [text[at:start], ANSWER_NOT_SHOWN]
        at = end
    out.append(text[at : within.end])
    return "".join(out)


def _bounded_context(chapter: source.Chapter, q: ParsedQuestion, title: str, *, answers: bool = False,
                     answered_after: list[Span] | None = None) -> str:
    """The section before the question, as the prompt's context (``answers`` False) or, with the
    book's answers to earlier questions kept, as the passage a judge sees beside the reference.
    ``answered_after``: the spans of answers that follow their question as plain text (cut from
    the prompt's context like the answer blocks)."""
    first = chapter.text.count("\n", 0, q.context.start) + 1
    where = (
        f"Source: *How To Scale Your Model*, chapter \"{title}\" ({chapter.filename} at "
        f"{source.REPOSITORY}@{source.COMMIT[:12]}), section \"{q.section or title}\", "
        f"lines {first}-{q.line - 1}."
    )
    section = q.context.text(chapter.text)
    if answers:
        raw = DETAILS_OPEN.sub("\n\n*Answer given in the book:*\n\n", section)
    else:
        raw = without_answer_blocks(without_spans(chapter.text, q.context, answered_after or []))
    body = to_markdown(raw)
    elided = "[...]\n"
    budget = CONTEXT_MAX - len(where) - len("\n\n") - len(elided)
    if len(body) > budget:
        body = _tail(body, budget)
        body = elided + body
    return f"{where}\n\n{body}".strip() if body else where


REDACTED = "[omitted]"


def _redact(texts: tuple[str, ...], figures: tuple[str, ...], key: str,
            known_in: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The prompt's book texts (context, question) with each figure (a number as written,
    standing alone) replaced: a prompt must not state its own answer. A figure found in none of
    them, nor in ``known_in`` (the texts before earlier answers were cut out), is an error, so a
    stale annotation is noticed rather than silently ignored."""
    for figure in figures:
        pattern = re.compile(rf"(?<![\d.]){re.escape(figure)}(?!\d|\.\d)")
        redacted = [pattern.subn(REDACTED, text) for text in texts]
        if not any(n for _, n in redacted) and not any(pattern.search(text) for text in known_in):
            raise AnnotationError(f"{key}: context_redact figure {figure!r} is not in the prompt")
        texts = tuple(text for text, _ in redacted)
    return texts


def _tail(body: str, budget: int) -> str:
    """The last `budget` characters, starting at a paragraph and never inside a code block."""
    body = body[-budget:]
    cut = body.find("\n\n")
    if 0 <= cut < budget // 3:
        body = body[cut + 2 :]
    lines = body.split("\n")
    fences = [i for i, line in enumerate(lines) if is_fence(line)]
    if len(fences) % 2:  # the cut fell inside a fenced block: drop its orphaned remainder
        body = "\n".join(lines[fences[0] + 1 :]).lstrip("\n")
    return body


def _hardware_block(
    names: list[str], records: dict[str, ChipRecord], headers: dict[str, tuple[str, str]]
) -> str:
    rows_by_table: dict[str, list[str]] = {}
    for name in names:
        for key, line in records[name].rows:
            if line not in rows_by_table.setdefault(key, []):
                rows_by_table[key].append(line)
    parts = []
    for key, (header, separator) in headers.items():
        if key in rows_by_table:
            parts.append("\n".join([header, separator, *rows_by_table[key]]))
    return to_markdown("\n\n".join(parts))


def _answer_format(ann: Annotation) -> str:
    if ann.grading == "numeric":
        n = len(ann.values)
        return (
            f"Give {ann.ask}. Work through the problem, then end with one line of the form "
            f"`Final answer: ...` stating {'this value' if n == 1 else f'these {n} values in this order'}, "
            "each with its unit where it has one."
        )
    return "Explain your reasoning, then end with a line starting `Final answer:` stating your conclusion."


HARDWARE_HEAD = "## Hardware specs (rows of the book's spec tables)"
QUESTION_HEAD = "## Question"


def _prompt(context: str, hardware: str, question: str, ann: Annotation) -> str:
    parts = ["## Context", context]
    if hardware:
        parts += [HARDWARE_HEAD, hardware]
    parts += [QUESTION_HEAD, question]
    if ann.assume:  # what the key takes as given where the question leaves it open
        parts += ["## Assumptions", ann.assume]
    parts += ["## Answer format", _answer_format(ann)]
    return "\n\n".join(parts)


def _split_answer(key: str, q: ParsedQuestion, text: str, ann: Annotation | None) -> ParsedQuestion:
    """A question answered by the text that follows it (a table, no answer block): cut the
    question's span where the annotation says the answer starts."""
    if q.answer is not None or ann is None or not ann.answer_starts:
        return q
    at = text.find(ann.answer_starts, q.question.start, q.question.end)
    if at <= q.question.start:
        raise AnnotationError(f"{key}: answer_starts {ann.answer_starts!r} is not inside the question")
    return replace(q, question=Span(q.question.start, at), answer=Span(at, q.question.end))


# ---- building --------------------------------------------------------------------------------


def _check_annotation(key: str, ann: Annotation, answer_raw: str, known_items: frozenset[str]) -> None:
    bad = [t for t in ann.tags if t not in known_items]
    if bad or not ann.tags:
        raise AnnotationError(f"{key}: tags must be key-content ids, got {list(ann.tags)}")
    for v in ann.values:
        if v.figure not in answer_raw:
            raise AnnotationError(f"{key}: figure {v.figure!r} does not occur in the source answer")


def build(chapters: dict[str, source.Chapter]) -> tuple[list[Task], list[Exclusion], dict[str, int]]:
    """Parse every chapter and turn each answered question into a task."""
    annotations = load_annotations()
    known_items = item_ids()
    titles = {c: kc.title for c, kc in key_content().items()}
    records = chip_records(chapters["tpus"].text, chapters["gpus"].text)
    headers = table_headers(chapters["tpus"].text, chapters["gpus"].text)
    tasks: list[Task] = []
    exclusions: list[Exclusion] = []
    markers: dict[str, int] = {}
    seen: set[str] = set()
    for name, chapter in chapters.items():
        parsed = parse_chapter(name, chapter.text)
        markers[name] = len(parsed)
        split = [_split_answer(f"{name}.q{q.index}", q, chapter.text, annotations.get(f"{name}.q{q.index}"))
                 for q in parsed]
        # answers that are the text after their question: later questions' contexts cut them too
        answered_after = [s.answer for q, s in zip(parsed, split, strict=True) if s is not q and s.answer is not None]
        for q in split:
            tid = task_id(name, q.index)
            key = f"{name}.q{q.index}"
            ann = annotations.get(key)
            seen.add(key)
            if q.answer is None:
                if ann is not None:
                    raise AnnotationError(f"{key}: annotated, but the source has no answer for it")
                exclusions.append(Exclusion(tid, name, q.label, q.line, q.exclusion or ""))
                continue
            if ann is None:
                raise AnnotationError(f"{key}: answered in the source but not annotated")
            answer_raw = q.answer.text(chapter.text)
            _check_annotation(key, ann, answer_raw, known_items)
            if ann.grading == "exclude":
                exclusions.append(Exclusion(tid, name, q.label, q.line, ann.reason or ""))
                continue
            keys = book_keys(ann) if ann.grading == "numeric" else None
            title = titles.get(name, name)
            passage = _bounded_context(chapter, q, title, answers=True)
            context, question_md = _redact(
                (_bounded_context(chapter, q, title, answered_after=answered_after),
                 to_markdown(q.question.text(chapter.text))),
                ann.context_redact, key, known_in=(passage,),
            )
            answer_md = to_markdown(answer_raw)
            named = chips_named(question_md + "\n" + answer_md)
            tasks.append(
                Task(
                    id=tid,
                    split=SPLIT,
                    prompt=_prompt(
                        context,
                        _hardware_block(named, records, headers),
                        question_md,
                        ann,
                    ),
                    grading=ann.grading,
                    gold=keys.gold if keys else answer_md,
                    chapter=name,
                    tags=ann.tags,
                    meta={
                        "label": q.label,
                        "title": q.title,
                        "section": q.section,
                        "chips": named,
                        "ask": ann.ask,
                        **(difficulty_tags(SOLUTIONS[key]) if keys else {}),
                        "source": {
                            "repository": source.REPOSITORY,
                            "commit": source.COMMIT,
                            "file": chapter.filename,
                            "line": q.line,
                            # the question's span only: a locator of the answer would hand it out
                            "question": _locator(chapter, q.question),
                        },
                    },
                    hidden={
                        "question": question_md, "reference": answer_md, "note": ann.note,
                        # the judge's source passage: the section, earlier answers included
                        "context": passage,
                        # numeric: the book's printed figures, accepted too where they differ
                        "printed": list(keys.printed) if keys else None,
                        "alternatives": [list(a) for a in keys.alternatives] if keys else [],
                        "differs": ann.differs,
                    },
                )
            )
    stray = sorted(set(annotations) - seen)
    if stray:
        raise AnnotationError(f"annotations name questions the source does not have: {', '.join(stray)}")
    return without_other_golds(tasks), exclusions, markers


CONTEXT_HEAD = "## Context\n\n"


def without_other_golds(tasks: list[Task]) -> list[Task]:
    """Tasks whose context (the book's prose before the question) no longer states another task's
    gold: the book often restates an earlier question's result further on ("that gives 3.6 TB/s"),
    which would hand that question's answer to anyone reading the later prompt. Only values with
    a unit are matched (a bare number is everywhere); the question itself is left as written."""
    golds: list[tuple[str, float]] = []
    for t in tasks:
        if t.grading == "numeric":
            for key in (t.gold, *(t.hidden.get("alternatives") or ())):  # every key that scores
                for g in key:
                    q = parse_quantity(g)
                    if not q.dimensionless and q.value:
                        golds.append((q.dimension, q.value))
    out = []
    for t in tasks:
        head, found, rest = t.prompt.partition(CONTEXT_HEAD)
        # the context ends where the prompt's own next part starts (it has headings of its own)
        end = rest.find(f"\n\n{HARDWARE_HEAD}\n\n")
        end = rest.rfind(f"\n\n{QUESTION_HEAD}\n\n") if end < 0 else end
        if not found or end < 0:
            out.append(t)
            continue
        context, tail = rest[:end], rest[end:]
        stated = {q.text for q in find_quantities(context)
                  if any(q.dimension == d and abs(q.value - v) <= 1e-9 * abs(v) for d, v in golds)}
        for text in sorted(stated, key=len, reverse=True):
            context = context.replace(text, REDACTED)
        out.append(t if not stated else replace(t, prompt=head + found + context + tail))
    return out


# ---- (de)serialisation for the cache ------------------------------------------------------------
# Questions in one section share most of their context, so texts are stored as lists of indices
# into one table of distinct paragraphs: the entry is under half the size of plain JSON, and
# decoding it (the whole cost of a cache hit) about 1.2 times faster, a fraction of a millisecond.


class _Paragraphs:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def pack(self, text: str) -> list[int]:
        return [self.index.setdefault(p, len(self.index)) for p in text.split("\n\n")]


def _dump(tasks: list[Task], exclusions: list[Exclusion], markers: dict[str, int], key: str) -> bytes:
    paragraphs = _Paragraphs()
    packed = []
    for t in tasks:
        packed.append({
            "id": t.id, "grading": t.grading, "chapter": t.chapter, "tags": list(t.tags),
            "tolerance": t.tolerance, "meta": dict(t.meta),
            "prompt": paragraphs.pack(t.prompt),
            # Judge gold is the reference answer: stored once, as "reference".
            "gold": list(t.gold) if t.grading == "numeric" else None,
            "question": paragraphs.pack(t.hidden["question"]),
            "reference": paragraphs.pack(t.hidden["reference"]),
            "note": t.hidden.get("note"),
            "context": paragraphs.pack(t.hidden["context"]),
            "printed": t.hidden.get("printed"),
            "alternatives": t.hidden.get("alternatives", []),
            "differs": t.hidden.get("differs"),
        })
    payload = {
        "key": key,
        "markers": markers,
        "exclusions": [_exclusion_dict(e) for e in exclusions],
        "paragraphs": list(paragraphs.index),
        "tasks": packed,
    }
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _exclusion_dict(e: Exclusion) -> dict[str, Any]:
    return {"id": e.id, "chapter": e.chapter, "label": e.label, "line": e.line, "reason": e.reason}


def _load(payload: bytes, key: str) -> BookBank:
    data = json.loads(payload)
    if data.get("key") != key:
        raise ValueError("cache entry was written under another key")
    table = data["paragraphs"]

    def text(indices: list[int]) -> str:
        return "\n\n".join([table[i] for i in indices])

    tasks = []
    for t in data["tasks"]:
        reference = text(t["reference"])
        tasks.append(Task(
            id=t["id"], split=SPLIT, prompt=text(t["prompt"]), grading=t["grading"],
            gold=tuple(t["gold"]) if t["grading"] == "numeric" else reference,
            chapter=t["chapter"], tags=tuple(t["tags"]), tolerance=t["tolerance"], meta=t["meta"],
            hidden={"question": text(t["question"]), "reference": reference, "note": t["note"],
                    "context": text(t["context"]),
                    "printed": t["printed"], "alternatives": t["alternatives"], "differs": t["differs"]},
        ))
    exclusions = [Exclusion(**e) for e in data["exclusions"]]
    return BookBank(tasks, exclusions, key, dict(data["markers"]))


def default_cache(settings: Settings) -> BankCache:
    disk = DiskBankCache(Path(settings.book_cache) / "parsed")
    if settings.redis_url:
        return LayeredBankCache(disk, RedisBankCache(settings.redis_url))
    return disk


def parse_bank(settings: Settings) -> BookBank:
    """Cold path: verify the source and parse it, ignoring any cached bank."""
    tasks, exclusions, markers = build(source.load_chapters(settings))
    return BookBank(tasks, exclusions, cache_key(), markers)


def load_bank(settings: Settings, cache: BankCache | None = None) -> BookBank:
    """The book bank: from the cache when an entry for this exact source/parser/annotations
    exists, else parsed from the verified source (and cached)."""
    cache = cache if cache is not None else default_cache(settings)
    key = cache_key()
    payload = cache.get(key)
    if payload is not None:
        try:
            return _load(payload, key)
        except (ValueError, KeyError, TypeError) as exc:  # a damaged entry costs a re-parse
            log.warning("book bank cache entry %s unusable (%s); parsing again", key, exc)
    bank = parse_bank(settings)
    cache.put(key, _dump(bank.tasks(), bank.exclusions, bank.markers, key))
    return bank


def summary(bank: BookBank) -> dict[str, Any]:
    """Size per chapter and grading kind, markers found, and every exclusion with its reason."""
    per_chapter: dict[str, dict[str, int]] = {}
    for name, n in bank.markers.items():
        per_chapter[name] = {"markers": n, "numeric": 0, "judge": 0, "excluded": 0}
    for t in bank.tasks():
        per_chapter[t.chapter or ""][t.grading] += 1
    for e in bank.exclusions:
        per_chapter[e.chapter]["excluded"] += 1
    return {
        "size": bank.size(),
        "grading": bank.info()["grading"],
        "chapters": per_chapter,
        "exclusions": [_exclusion_dict(e) for e in bank.exclusions],
    }

"""Find the book's worked questions and their answers.

A question starts at a marker at the start of a line, in any of the forms the chapters use:
``**Question 3 [title]:**``, ``**Question 3 [title]**:``, ``**Question:**``, ``**Question 1**:``,
``**Question 10: title:**``, ``**Problem 5 [title]:**``, ``**Pop Quiz [title]:**`` and the same
labels inside a coloured ``<b ...>...</b>``. Its answer is the Liquid ``{% details %}`` block that
follows before the next marker or heading. A question with no such block has no answer in the
source and is excluded with that reason: nothing is invented for it.

The parser returns character spans into the verified chapter text; rendering to Markdown is
separate (markdown.py), so locators stay exact."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# Bump whenever parsing or rendering changes what a task contains: it is part of the cache key.
PARSER_VERSION = "9"

MARKER = re.compile(
    r"^(?:\*\*|<b\b[^>]*>)[ \t]*"
    r"(?P<kind>Question|Problem|Pop Quiz)"
    r"(?:[ \t]+(?P<num>\d+))?"
    r"(?:[ \t]*\[(?P<title>[^\]\n]*)\])?"
    r"(?:[ \t]*:[ \t]*(?P<title2>[^*<\n:]+?))?"
    r"[ \t]*:?[ \t]*(?:\*\*|</b>)[ \t]*:?",
    re.MULTILINE,
)
# Markdown headings and the HTML headings the book uses for "next section" links.
HEADING = re.compile(r"^(?:#{1,6}[ \t]|<h[1-6]\b)", re.MULTILINE)
SECTION_HEADING = re.compile(r"^(#{1,3})[ \t]+(?P<title>.+)$", re.MULTILINE)
DETAILS_OPEN = re.compile(r"\{%-?\s*details\b.*?-?%\}", re.DOTALL)
DETAILS_ANY = re.compile(r"\{%-?\s*(?P<end>end)?details\b.*?-?%\}", re.DOTALL)

NO_ANSWER = "no answer in the source: no details block follows the question before the next one"


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int

    def text(self, source: str) -> str:
        return source[self.start : self.end]

    def sha256(self, source: str) -> str:
        return hashlib.sha256(self.text(source).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class ParsedQuestion:
    chapter: str
    index: int  # 1-based position among the chapter's markers: the stable task number
    label: str  # "Question 3", "Pop Quiz", "Problem 1"
    title: str | None
    line: int  # 1-based line of the marker
    question: Span  # from the marker to the answer block (or the next marker/heading)
    answer: Span | None  # inside the details block, tags excluded
    section: str | None  # nearest heading above the marker
    context: Span  # text of the enclosing section before the marker

    @property
    def answered(self) -> bool:
        return self.answer is not None

    @property
    def exclusion(self) -> str | None:
        return None if self.answered else NO_ANSWER


def _matching_end(text: str, open_match: re.Match[str]) -> tuple[int, int] | None:
    """(content end, block end) of the details block opened by open_match, honouring nesting."""
    depth = 1
    for m in DETAILS_ANY.finditer(text, open_match.end()):
        depth += -1 if m.group("end") else 1
        if depth == 0:
            return m.start(), m.end()
    return None


def is_fence(line: str) -> bool:
    """A line opening or closing a fenced block (a one-line ```code``` is neither)."""
    s = line.strip()
    return s.startswith("```") and not (len(s) > 6 and s.endswith("```"))


def _fenced_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of fenced code blocks: a "# comment" there is code, not a heading."""
    ranges, start, pos = [], None, 0
    for line in text.split("\n"):
        if is_fence(line):
            if start is None:
                start = pos
            else:
                ranges.append((start, pos + len(line)))
                start = None
        pos += len(line) + 1
    if start is not None:
        ranges.append((start, len(text)))
    return ranges


def _in_code(ranges: list[tuple[int, int]], pos: int) -> bool:
    return any(a <= pos < b for a, b in ranges)


def _next_start(pattern: re.Pattern[str], text: str, pos: int, default: int, code: list[tuple[int, int]]) -> int:
    for m in pattern.finditer(text, pos):
        if not _in_code(code, m.start()):
            return m.start()
    return default


FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)
# Questions often say "the above": give them the section they sit in, reaching back past a bare
# "Worked Problems" heading to the previous section when the enclosing one is this short.
MIN_CONTEXT_CHARS = 1500


def _body_start(text: str) -> int:
    m = FRONT_MATTER.match(text)
    return m.end() if m else 0


def _context_start(sections: list[re.Match[str]], marker: int, body: int) -> int:
    top = [h.start() for h in sections if len(h.group(1)) <= 2 and h.start() >= body]
    for start in reversed(top):
        if marker - start >= MIN_CONTEXT_CHARS:
            return start
    return top[0] if top else body


def parse_chapter(chapter: str, text: str) -> list[ParsedQuestion]:
    code = _fenced_ranges(text)
    markers = [m for m in MARKER.finditer(text) if not _in_code(code, m.start())]
    headings = [h for h in SECTION_HEADING.finditer(text) if not _in_code(code, h.start())]
    questions: list[ParsedQuestion] = []
    for i, m in enumerate(markers):
        next_marker = markers[i + 1].start() if i + 1 < len(markers) else len(text)
        limit = min(next_marker, _next_start(HEADING, text, m.end(), len(text), code))
        answer: Span | None = None
        question_end = limit
        opening = DETAILS_OPEN.search(text, m.end(), limit)
        if opening is not None:
            ends = _matching_end(text, opening)
            if ends is not None:
                answer = Span(opening.end(), ends[0])
                question_end = opening.start()
        sections = [h for h in headings if h.start() < m.start()]
        section = sections[-1].group("title").strip() if sections else None
        context_start = _context_start(sections, m.start(), _body_start(text))
        kind, num = m.group("kind"), m.group("num")
        title = (m.group("title") or m.group("title2") or "").strip() or None
        questions.append(
            ParsedQuestion(
                chapter=chapter,
                index=i + 1,
                label=f"{kind} {num}" if num else kind,
                title=title,
                line=text.count("\n", 0, m.start()) + 1,
                question=Span(m.start(), question_end),
                answer=answer,
                section=section,
                context=Span(context_start, m.start()),
            )
        )
    return questions

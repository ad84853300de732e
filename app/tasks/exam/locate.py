"""Authoring aid: turn a search pattern into a locator for a conceptual question.

    python -m app.tasks.exam.locate CHAPTER PATTERN

finds the first match of PATTERN (a regular expression) in the verified chapter, widens it to the
enclosing paragraph and prints the locator (start, end, SHA-256 of the span) to paste into
concepts.toml. Only the locator is stored; the passage itself stays in the book."""

from __future__ import annotations

import argparse
import hashlib
import re
import sys

from app.settings import Settings
from app.tasks.exam.source import chapter_text


def span_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def paragraph_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The blank-line-delimited paragraph holding text[start:end]."""
    left = text.rfind("\n\n", 0, start)
    right = text.find("\n\n", end)
    left = 0 if left == -1 else left + 2
    right = len(text) if right == -1 else right
    return left, right


def locate(text: str, pattern: str) -> tuple[int, int, str]:
    m = re.search(pattern, text)
    if m is None:
        raise LookupError(f"pattern {pattern!r} not found")
    start, end = paragraph_around(text, m.start(), m.end())
    return start, end, span_sha256(text[start:end])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.tasks.exam.locate")
    parser.add_argument("chapter")
    parser.add_argument("pattern")
    args = parser.parse_args(argv)
    text = chapter_text(Settings(), args.chapter)
    start, end, digest = locate(text, args.pattern)
    print(f'locator = {{ start = {start}, end = {end}, sha256 = "{digest}" }}')
    return 0


if __name__ == "__main__":
    sys.exit(main())

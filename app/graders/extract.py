"""Find the answer a completion commits to: the last ``Final answer:`` line or the last
``\\boxed{...}``, whichever comes later. Reasoning inside ``<think>`` blocks and anything inside
code (fenced blocks and inline backticks) is not an answer, so a value quoted in code or a
draft in the thinking trace cannot be graded."""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"(```|~~~).*?(?:\1|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_FINAL = re.compile(r"final\s+answer\s*(?:\*\*|__)?\s*[:：]", re.IGNORECASE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


# Invisible format characters (zero-width spaces and joiners, soft hyphens, bidi controls, tags)
# and full-width Latin: "Final\u200banswer:" or "Ｆｉｎａｌ ａｎｓｗｅｒ:" reads as a final-answer
# line to anyone looking at the completion, so it must count as one; otherwise an earlier, hidden
# line would be graded instead of the answer a reader sees last.
_INVISIBLE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]"
)
_FULL_WIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}


def as_seen(text: str) -> str:
    """The text as a reader sees it: invisible characters dropped, full-width Latin folded."""
    if text.isascii():  # O(1) in CPython, and the common case: nothing to drop or fold
        return text
    return _INVISIBLE.sub("", text).translate(_FULL_WIDTH)


@dataclass(frozen=True, slots=True)
class Extraction:
    text: str
    source: str  # "final_line" or "boxed"


def _drop_closed_blocks(text: str) -> str:
    """Each ``<think>...</think>`` replaced by a space. Hand-rolled rather than a lazy regex:
    ``<think>.*?</think>`` rescans to the end from every unclosed ``<think>``, so a completion
    of repeated openers took seconds (quadratic); this is one pass."""
    parts: list[str] = []
    pos = 0
    while (opened := _THINK_OPEN.search(text, pos)) is not None:
        closed = _THINK_CLOSE.search(text, opened.end())
        if closed is None:  # no later opener can close either
            break
        parts.append(text[pos : opened.start()])
        parts.append(" ")
        pos = closed.end()
    parts.append(text[pos:])
    return "".join(parts)


def _last_close(text: str) -> re.Match[str] | None:
    closes = list(_THINK_CLOSE.finditer(text))
    return closes[-1] if closes else None


def strip_thinking(completion: str) -> str:
    """The completion without its reasoning trace; empty if the thinking never finished."""
    text = _drop_closed_blocks(completion)
    close = _last_close(text)
    if close is not None:
        return text[close.end() :]
    if _THINK_OPEN.search(text):  # thinking never finished: no committed answer
        return ""
    return text


def strip_non_answers(completion: str) -> str:
    text = strip_thinking(completion)
    text = _FENCE.sub(" ", text)
    return _INLINE_CODE.sub(" ", text)


def _balanced(text: str, start: int, end: int) -> str | None:
    """Content from just after an opening brace to its matching close before ``end``, or None."""
    depth = 1
    for i in range(start, end):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def _last_final_line(text: str) -> tuple[int, str] | None:
    last = None
    for m in _FINAL.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() :]
    line, _, after = rest.partition("\n")
    line = line.strip().strip("*_").strip()
    if not line:  # "Final answer:" alone on its line: the answer is the next non-empty line
        for nxt in after.split("\n"):
            if nxt.strip():
                line = nxt.strip().strip("*_").strip()
                break
    return last.start(), line


def _last_boxed(text: str) -> tuple[int, str] | None:
    end = len(text)
    for m in reversed(list(_BOXED.finditer(text))):
        content = _balanced(text, m.end(), end)
        if content is not None:
            return m.start(), content
        # This box never closes, so an earlier box still open where it starts never closes
        # either: later scans stop here, keeping thousands of unclosed boxes linear, not quadratic.
        end = m.start()
    return None


def extract_answer(completion: str) -> Extraction | None:
    text = strip_non_answers(as_seen(completion))
    final = _last_final_line(text)
    boxed = _last_boxed(text)
    if final is None and boxed is None:
        return None
    if boxed is not None and (final is None or boxed[0] >= final[0]):
        return Extraction(boxed[1].strip(), "boxed")
    assert final is not None
    return Extraction(final[1], "final_line")

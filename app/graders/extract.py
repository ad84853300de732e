"""Find the answer a completion commits to: the last ``Final answer:`` line or the last
``\\boxed{...}``, whichever comes later. Reasoning inside ``<think>`` blocks and anything inside
code (fenced blocks and inline backticks) is not an answer, so a value quoted in code or a
draft in the thinking trace cannot be graded."""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_CLOSED = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"(```|~~~).*?(?:\1|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_FINAL = re.compile(r"final\s+answer\s*(?:\*\*|__)?\s*[:：]", re.IGNORECASE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


@dataclass(frozen=True, slots=True)
class Extraction:
    text: str
    source: str  # "final_line" or "boxed"


def strip_thinking(completion: str) -> str:
    """The completion without its reasoning trace; empty if the thinking never finished."""
    text = _THINK_CLOSED.sub(" ", completion)
    # Templates that open thinking implicitly leave only a closing tag: drop what precedes it.
    close = text.lower().rfind("</think>")
    if close != -1:
        return text[close + len("</think>") :]
    if "<think>" in text.lower():  # thinking never finished: no committed answer
        return ""
    return text


def strip_non_answers(completion: str) -> str:
    text = strip_thinking(completion)
    text = _FENCE.sub(" ", text)
    return _INLINE_CODE.sub(" ", text)


def _balanced(text: str, start: int) -> str | None:
    """Content from just after an opening brace to its matching close, or None if unclosed."""
    depth = 1
    for i in range(start, len(text)):
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
    for m in reversed(list(_BOXED.finditer(text))):
        content = _balanced(text, m.end())
        if content is not None:
            return m.start(), content
    return None


def extract_answer(completion: str) -> Extraction | None:
    text = strip_non_answers(completion)
    final = _last_final_line(text)
    boxed = _last_boxed(text)
    if final is None and boxed is None:
        return None
    if boxed is not None and (final is None or boxed[0] >= final[0]):
        return Extraction(boxed[1].strip(), "boxed")
    assert final is not None
    return Extraction(final[1], "final_line")

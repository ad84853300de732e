"""Find the answer a completion commits to: the last ``Final answer:`` line or the last
``\\boxed{...}``, whichever comes later. Reasoning inside ``<think>`` blocks, HTML comments
(hidden when the answer is rendered), anything inside code (fenced blocks and inline backticks)
and struck-through text (a retracted draft) is not an answer, so a value quoted in code, hidden
in a comment or crossed out cannot be graded."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from app.graders.completion import prose, strip_thinking
from app.graders.confusables import latin_skeleton

_INLINE_CODE = re.compile(r"`[^`\n]*`")
_FINAL = re.compile(r"final\s+answer\s*(?:\*\*|__)?\s*[:：]", re.IGNORECASE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Struck-through text is a retraction: Markdown ~~...~~, HTML <s>/<del>/<strike>, LaTeX \sout{}.
_STRUCK = re.compile(
    r"~~(?=\S)[^~\n]*?~~|\\(?:sout|st|xout|cancel|bcancel|xcancel)\s*\{[^{}]*\}", re.IGNORECASE
)
_STRIKE_TAG = re.compile(r"<(/?)(s|del|strike)\b[^<>]{0,200}>", re.IGNORECASE)


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


def strip_non_answers(completion: str) -> str:
    text = prose(strip_thinking(completion))
    # Each pass is skipped when the character its pattern starts with is absent: most answers
    # have no backtick, tilde or backslash, and a regex pass over them finds nothing.
    if "`" in text:
        text = _INLINE_CODE.sub(" ", text)
    text = _drop_struck_tags(text)
    return _STRUCK.sub(" ", text) if "~" in text or "\\" in text else text


def _drop_struck_tags(text: str) -> str:
    """Each <s>, <del> or <strike> element dropped with its content, in one pass (a lazy regex
    would rescan to the end from every unclosed opener). An element never closed is left alone:
    a stray "<s>" in prose does not hide the answer after it."""
    if "<" not in text:
        return text
    parts: list[str] = []
    pos = 0
    open_at: tuple[int, str] | None = None
    for m in _STRIKE_TAG.finditer(text):
        closing, name = m.group(1) == "/", m.group(2).lower()
        if open_at is None and not closing:
            open_at = (m.start(), name)
        elif open_at is not None and closing and name == open_at[1]:
            parts.append(text[pos : open_at[0]])
            parts.append(" ")
            pos, open_at = m.end(), None
    parts.append(text[pos:])
    return "".join(parts)


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
    # The label is looked for with look-alike letters folded ("Final аnswer:" with a Cyrillic a
    # is the label a reader sees); the answer is read from the text as written.
    for m in _FINAL.finditer(latin_skeleton(text)):
        last = m
    if last is None:
        return None
    rest = text[last.end() :]
    line, _, after = rest.partition("\n")
    line = line.strip().strip("*_").strip()
    lines = iter(after.split("\n"))
    if not line:  # "Final answer:" alone on its line: the answer is the next non-empty line
        for nxt in lines:
            if nxt.strip():
                line = nxt.strip().strip("*_").strip()
                break
    return last.start(), _with_display_math(line, lines)


# Display math opened on the answer line and closed on a later one ("\[" ... "\]", "$$" ... "$$")
# is one answer: its lines are joined, up to a bound, so the value inside is the one graded.
_DISPLAY_OPENERS = (("\\[", "\\]"), ("$$", "$$"), ("\\begin{", "\\end{"))
_MAX_DISPLAY_LINES = 12


def _with_display_math(line: str, following: Iterator[str]) -> str:
    for opener, closer in _DISPLAY_OPENERS:
        at = line.rfind(opener)
        if at < 0 or closer in line[at + len(opener) :]:
            continue
        parts = [line]
        for _, nxt in zip(range(_MAX_DISPLAY_LINES), following, strict=False):
            parts.append(nxt.strip())
            if closer in nxt:
                break
        return " ".join(parts)
    return line


def _last_boxed(text: str) -> tuple[int, str] | None:
    if "\\" not in text:  # every box starts with a backslash
        return None
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

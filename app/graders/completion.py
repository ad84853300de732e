"""What a completion commits to, before any grader reads it: the reasoning trace removed, and its
fenced blocks found by one grammar, shared by every extractor (numeric, rows, impl, judge).

The fence grammar. A fence opens with ``` or ~~~, then an info string (its first word is the
block's label, e.g. ``python`` or ``json``) to the end of the line, and a newline; its body runs
to the next occurrence of the same mark, which need not start a line (models often close on the
code's last line), or to the end of the text when it never closes. An opener with nothing after it
but the end of the text opens no block. Where only prose counts (a numeric answer), a mark closed
on its own line (```5 GB```) or left open on the last line is code too: ``prose`` drops it.

Everything here is linear in the length of the completion: inline grading runs on the server's
event loop, and a completion of repeated openers must not cost seconds."""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)

# HTML comments are hidden when the answer is rendered; an unclosed one hides everything after it.
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)

# What a tokenizer adds around a completion when it is decoded with special tokens kept: BOS,
# EOS, end-of-turn and padding tokens of common templates.
_SPECIAL_TOKEN = re.compile(
    r"<\|[^|<>\n]{1,40}\|>|<｜[^｜<>\n]{1,40}｜>|<pad>|<unk>|<eos>|<bos>|<(?:start|end)_of_turn>"
)
_BOS, _EOS = "<s>", "</s>"

_FENCE_OPEN = re.compile(r"(```|~~~)[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n")
# A mark closed on its own line, or left open on the text's last line: an inline span, not a block.
_INLINE_SPAN = re.compile(r"(```|~~~)[^\n]*?(?:\1|\Z)")


@dataclass(frozen=True, slots=True)
class Fence:
    label: str  # the info string's first word ("" when there is none)
    body: str
    start: int  # where the opening mark starts
    end: int  # just after the closing mark (the end of the text when it never closes)


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


def _after_last_close(text: str) -> str | None:
    """The text after its last ``</think>``, or None when there is none."""
    last = None
    for last in _THINK_CLOSE.finditer(text):  # noqa: B007 (only the last one matters)
        pass
    return None if last is None else text[last.end() :]


def strip_hidden(text: str) -> str:
    """HTML comments dropped: a reader of the rendered answer never sees them."""
    return _HTML_COMMENT.sub(" ", text) if "<!--" in text else text


def strip_thinking(completion: str) -> str:
    """The completion without its reasoning trace and hidden comments; empty if the thinking
    never finished (an answer inside an unfinished trace was never committed to)."""
    if "<" not in completion:  # no tag and no comment can be present: the common case, no scans
        return completion
    text = strip_hidden(_drop_closed_blocks(completion))
    after = _after_last_close(text)
    if after is not None:
        return after
    if _THINK_OPEN.search(text):
        return ""
    return text


def fences(text: str) -> list[Fence]:
    """Every fenced block, in order (see the module docstring for the grammar). An opener needs a
    newline after it, so the search for one stops at the last newline: from a mark on the final
    line it would scan to the end and fail, once per mark (quadratic)."""
    found: list[Fence] = []
    pos, stop = 0, text.rfind("\n") + 1
    while (opened := _FENCE_OPEN.search(text, pos, stop)) is not None:
        mark = opened.group(1)
        close = text.find(mark, opened.end())
        body_end = len(text) if close == -1 else close
        end = len(text) if close == -1 else close + len(mark)
        found.append(Fence(opened.group(2), text[opened.end() : body_end], opened.start(), end))
        pos = end
    return found


def outside(text: str, blocks: list[Fence]) -> str:
    """The text with each of ``blocks`` (found in it by ``fences``) replaced by a space."""
    parts: list[str] = []
    pos = 0
    for block in blocks:
        parts.append(text[pos : block.start])
        parts.append(" ")
        pos = block.end
    parts.append(text[pos:])
    return "".join(parts)


def prose(text: str) -> str:
    """The text with its inline spans of a fence mark (```x``` within a line, or a mark left open
    on the last line) and then its fenced blocks replaced by spaces: what is left is where a
    committed answer can be."""
    if "```" not in text and "~~~" not in text:  # both patterns need a mark: nothing to drop
        return text
    text = _INLINE_SPAN.sub(" ", text)
    return outside(text, fences(text))


def without_edge_tokens(text: str) -> str:
    """``text`` without the runs of special tokens at its very start and end (and the whitespace
    between them), and without an unpaired ``<s>``/``</s>`` there: what decoding with special
    tokens kept adds around a completion. The same characters inside the text stay: a policy can
    type them, and deleting them would join what they separate (a number to its unit, a
    strike-through or comment mark). A ``<s>``/``</s>`` pair is a struck-through span, so only an
    unpaired one goes. Every entry point grades through this, so the same completion gets the
    same reward on each. Walked by index: a long run costs linear time."""
    opened, closed = text.count(_BOS), text.count(_EOS)
    start, end = 0, len(text)
    while True:  # leading BOS and tokens; whitespace only between or before them
        at = start
        while at < end and text[at].isspace():
            at += 1
        if text.startswith(_BOS, at, end) and opened > closed:
            start, opened = at + len(_BOS), opened - 1
            continue
        m = _SPECIAL_TOKEN.match(text, at, end)
        if m is None:
            break
        start = m.end()
    while True:  # trailing EOS, end-of-turn and padding tokens
        at = end
        while at > start and text[at - 1].isspace():
            at -= 1
        if text.endswith(_EOS, start, at) and closed > opened:
            end, closed = at - len(_EOS), closed - 1
            continue
        opener = text.rfind("<", max(start, at - 48), at)
        if opener < 0 or _SPECIAL_TOKEN.fullmatch(text, opener, at) is None:
            break
        end = opener
    return text if (start, end) == (0, len(text)) else text[start:end]

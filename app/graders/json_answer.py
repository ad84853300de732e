"""Find the JSON answer a completion commits to: the last fenced JSON block or, when there is
none, the last top-level JSON object that has a ``rows`` key.

A fenced block counts as JSON when its info string is ``json`` or when it has no info string
and its content starts with ``{`` or ``[``. The last such block is the answer even when it is
malformed: falling back to an earlier block would reward a draft the model went on to replace.
Reasoning inside ``<think>`` is never an answer, and neither is code in other fenced blocks."""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

from app.graders.completion import fences, outside, strip_thinking


class DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    source: str  # "fence" or "bare"
    value: Any = None
    error: str | None = None  # why the committed block could not be read

    @property
    def ok(self) -> bool:
        return self.error is None


def _is_json_fence(label: str, body: str) -> bool:
    if label.lower() == "json":
        return True
    return label == "" and body.lstrip()[:1] in ("{", "[")


def _parse(text: str) -> tuple[Any, str | None]:
    try:
        value, end = _DECODER.raw_decode(text.strip())
    except DuplicateKey as exc:
        return None, str(exc)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except (ValueError, RecursionError):  # over-long integers, absurd nesting
        return None, "not valid JSON (too deeply nested or too large a number)"
    if end != len(text.strip()):
        return None, "not valid JSON (extra text after the value)"
    return value, None


_SPECIAL = re.compile(r'[{}"\\]')
# Inside braces a quote opens a JSON string only where JSON allows one (after { [ , or :), so an
# apostrophe-like quote in prose between a stray brace and the answer does not derail the scan.
_STRING_CONTEXT = re.compile(r"[{\[,:]\s*\Z")


def _brace_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced {...} span, sorted by start. Quotes count only inside braces,
    so prose around the JSON cannot put the scan out of step. One pass: linear in the text."""
    stack: list[int] = []
    spans: list[tuple[int, int]] = []
    in_string = False
    escaped_until = -1
    for m in _SPECIAL.finditer(text):
        pos, c = m.start(), m.group()
        if pos < escaped_until:
            continue
        if in_string:
            if c == "\\":
                escaped_until = pos + 2
            elif c == '"':
                in_string = False
        elif c == "{":
            stack.append(pos)
        elif c == "}" and stack:
            spans.append((stack.pop(), pos + 1))
        elif c == '"' and stack and _STRING_CONTEXT.search(text, max(0, pos - 64), pos):
            in_string = True
    spans.sort()
    return spans


def _last_bare_object(text: str) -> Any:
    """The last top-level JSON object with a "rows" key; objects nested in others don't count.

    Only balanced spans are parsed, and a span containing a point where an enclosing span
    already failed to parse is skipped (it would fail at the same point), so degenerate output
    such as thousands of braces costs linear time, not quadratic."""
    found = None
    parsed_until = 0
    failures: list[int] = []
    for start, end in _brace_spans(text):
        if start < parsed_until:
            continue  # inside an object already read: not top-level
        k = bisect.bisect_right(failures, start)
        if k < len(failures) and failures[k] < end:
            continue
        try:
            value = _DECODER.decode(text[start:end])
        except json.JSONDecodeError as exc:
            bisect.insort(failures, start + exc.pos)
            continue
        except ValueError:  # an integer too long to convert
            bisect.insort(failures, start + 1)
            continue
        except RecursionError:  # nested too deep to be an answer: skip everything inside it
            parsed_until = end
            continue
        parsed_until = end
        if isinstance(value, dict) and "rows" in value:
            found = value
    return found


def find_json_answer(completion: str) -> JsonAnswer | None:
    text = strip_thinking(completion)
    blocks = fences(text)
    json_blocks = [f for f in blocks if _is_json_fence(f.label, f.body)]
    if json_blocks:
        value, error = _parse(json_blocks[-1].body)
        return JsonAnswer("fence", value, error)
    bare = _last_bare_object(outside(text, blocks))
    if bare is None:
        return None
    return JsonAnswer("bare", bare)

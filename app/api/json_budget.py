"""A bound on how many JSON values a large body holds, checked before it is parsed, and the
outline of the body's top-level lists that lets it be parsed a piece at a time.

A large body is scanned and parsed in a grading process (app/api/bodies.py), whose interpreter is
not the event loop's; what these bounds keep in check is the time and memory one body costs that
process. A body of a few megabytes made of hundreds of thousands of tiny values (a label object of
440,000 keys) costs a second or more to parse: the parse's cost is in its number of values, not
its bytes. This scan reads the body token by token in Python (a long string is one token matched
at C speed) and stops at the first bound passed:

- an element of the body's lists (a batch item, a label, a query) holds at most
  ``MAX_ELEMENT_VALUES`` values and keys (a reference of a thousand rows is about 8,000);
- a list of the body holds at most ``max_elements`` elements (the largest batch the limits
  allow), and its top-level object at most as many keys.

On the way it notes where each element of a top-level list starts and ends (``Outline``), so
that app/api/json_pieces.py can parse the elements one by one: the lock is then held for one
element at a time, each bounded as above."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from app.errors import ApiError

MAX_ELEMENT_VALUES = 64 * 1024
# A JSON string (escapes included), or one punctuation mark: separators and openers count values.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')
_OPEN, _CLOSE, _QUOTE = frozenset(b"[{"), frozenset(b"]}"), ord('"')
_ARRAY, _COMMA, _COLON = ord("["), ord(","), ord(":")
_JSON_SPACE = b" \t\r\n"

Span = tuple[int, int]  # [start, end) in the body


@dataclass
class Outline:
    """The top-level object's lists: key -> (the list's span, brackets included; its elements'
    spans), the keys that occur more than once (a parse keeps one of their values: such a
    body is parsed whole), and how deep its arrays and objects nest (the parser refuses a body
    nested past its limit, which an element parsed alone, two levels shallower, may not reach:
    ``depth`` is the most arrays and objects any value of the body is inside), and how many
    values each key's value holds (``values``: what is not parsed a piece at a time is parsed
    in one go, and must be bounded like one piece)."""

    arrays: dict[str, tuple[Span, list[Span]]] = field(default_factory=dict)
    repeated: set[str] = field(default_factory=set)
    depth: int = 0
    values: dict[str, int] = field(default_factory=dict)


def _key(raw: bytes, token: re.Match[bytes] | None) -> str | None:
    if token is None:
        return None
    try:
        key = json.loads(raw[token.start():token.end()])
    except ValueError:  # a bad escape: the parse describes it
        return None
    return key if isinstance(key, str) else None


def _nesting(raw: bytes, close: int, depth: int) -> int:
    """How many containers the deepest value of the one closed at ``close`` (at ``depth``) is
    inside: ``depth`` if it holds anything, else one fewer (its own)."""
    before = close - 1
    while before > 0 and raw[before] in _JSON_SPACE:
        before -= 1
    return depth - 1 if raw[before] in _OPEN else depth


def outline_json(raw: bytes, max_elements: int) -> Outline:
    """The body's ``Outline``; ApiError 413 if ``raw`` passes a bound (see the module
    docstring). Malformed JSON is left to the parser to describe."""
    outline = Outline()
    depth, in_element, elements, keys = 0, 0, 0, 0
    last_string: re.Match[bytes] | None = None  # the latest string of the top-level object
    key: str | None = None  # the key whose value is being read
    array_key: str | None = None  # the key of the list being outlined
    array_start = element_start = 0
    spans: list[Span] = []
    seen: set[str] = set()
    value_tokens = 0  # in the value of ``key`` so far
    for match in _TOKEN.finditer(raw):
        at = match.start()
        mark = raw[at]
        if mark == _QUOTE:
            if depth == 1:
                last_string = match
            continue
        if depth >= 2:
            value_tokens += 1
        if mark in _OPEN:
            depth += 1
            if depth == 2:
                elements = 0  # each list is bounded on its own
            if depth == 2 and mark == _ARRAY and key is not None:
                array_key, array_start, element_start, spans = key, at, at + 1, []
        elif mark in _CLOSE:
            if depth >= outline.depth:
                outline.depth = max(outline.depth, _nesting(raw, at, depth))
            depth -= 1
            if depth == 1:
                name = key or ""
                outline.values[name] = outline.values.get(name, 0) + value_tokens
                value_tokens = 0
            if depth <= 2:
                in_element = 0
            if depth == 1 and array_key is not None:
                if spans or raw[element_start:at].strip(_JSON_SPACE):
                    spans.append((element_start, at))
                outline.arrays[array_key] = ((array_start, at + 1), spans)
                array_key = None
            continue
        elif depth == 1:
            if mark == _COLON:
                key = _key(raw, last_string)
                if key is not None and key in seen:
                    outline.repeated.add(key)
                seen.add(key or "")
                keys += 1
                if keys > max_elements:
                    raise ApiError(413, "body_too_complex", f"this body's object holds more than {max_elements} keys")
            else:
                key = None
            continue
        if depth >= 3:  # inside an element of a top-level list (or a field's object)
            in_element += 1
            if in_element > MAX_ELEMENT_VALUES:
                raise ApiError(413, "body_too_complex",
                               f"one item (or label) of this body holds more than {MAX_ELEMENT_VALUES} JSON values")
        elif depth == 2 and mark == _COMMA:
            elements += 1
            if elements >= max_elements:
                raise ApiError(413, "body_too_complex", f"a list of this body holds more than {max_elements} entries")
            if array_key is not None:
                spans.append((element_start, at))
                element_start = at + 1
    return outline


def check_json_budget(raw: bytes, max_elements: int) -> None:
    """ApiError 413 if ``raw`` passes a bound (see the module docstring)."""
    outline_json(raw, max_elements)

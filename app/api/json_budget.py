"""A bound on how many JSON values a large body holds, checked before it is parsed.

Parsing JSON into Python objects holds the interpreter lock from start to end, so a body of a
few megabytes made of hundreds of thousands of tiny values (a label object of 440,000 keys)
stalls the event loop for a second or more even when parsed on a worker thread; the parse's cost
is in its number of values, not its bytes. This scan reads the body token by token in Python
(the interpreter hands the lock over between tokens, and a long string is one token matched at C
speed) and stops at the first bound passed:

- an element of the body's lists (a batch item, a label, a query) holds at most
  ``MAX_ELEMENT_VALUES`` values and keys (a reference of a thousand rows is about 8,000);
- a list of the body holds at most ``max_elements`` elements (the largest batch the limits allow).

So the parse that follows holds the lock for a bounded time per element and in all."""

from __future__ import annotations

import re

from app.errors import ApiError

MAX_ELEMENT_VALUES = 64 * 1024
# A JSON string (escapes included), or one punctuation mark: separators and openers count values.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')
_OPEN, _CLOSE, _QUOTE = frozenset(b"[{"), frozenset(b"]}"), ord('"')


def check_json_budget(raw: bytes, max_elements: int) -> None:
    """ApiError 413 if ``raw`` passes a bound (see the module docstring); malformed JSON is left
    to the parser to describe."""
    depth, in_element, elements = 0, 0, 0
    for match in _TOKEN.finditer(raw):
        mark = raw[match.start()]
        if mark == _QUOTE:
            continue
        if mark in _OPEN:
            depth += 1
        elif mark in _CLOSE:
            depth -= 1
            if depth <= 2:
                in_element = 0
            continue
        if depth >= 3:  # inside an element of a top-level list (or a field's object)
            in_element += 1
            if in_element > MAX_ELEMENT_VALUES:
                raise ApiError(413, "body_too_complex",
                               f"one item (or label) of this body holds more than {MAX_ELEMENT_VALUES} JSON values")
        elif depth == 2 and mark == ord(","):
            elements += 1
            if elements >= max_elements:
                raise ApiError(413, "body_too_complex", f"a list of this body holds more than {max_elements} entries")

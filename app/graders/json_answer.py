"""Find the JSON answer a completion commits to: the last fenced JSON block or, when there is
none, the last top-level JSON object that has a ``rows`` key.

A fenced block counts as JSON when its info string is ``json`` or when it has no info string
and its content starts with ``{`` or ``[``. The last such block is the answer even when it is
malformed: falling back to an earlier block would reward a draft the model went on to replace.
Reasoning inside ``<think>`` is never an answer, and neither is code in other fenced blocks."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from app.graders.extract import strip_thinking

# A fence opens with ``` or ~~~ and an info string on the same line, and closes at the same mark
# (models often close on the JSON's last line, so the close need not start a line).
_FENCE = re.compile(r"(?P<mark>```|~~~)(?P<info>[^\n`~]*)\n(?P<body>.*?)(?:(?P=mark)|\Z)", re.DOTALL)


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


def _is_json_fence(info: str, body: str) -> bool:
    tag = info.strip().split(maxsplit=1)[0].lower() if info.strip() else ""
    if tag == "json":
        return True
    return tag == "" and body.lstrip()[:1] in ("{", "[")


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


def _last_bare_object(text: str) -> Any:
    """The last top-level JSON object with a "rows" key; objects nested in others don't count."""
    found = None
    i = text.find("{")
    while i != -1:
        try:
            value, end = _DECODER.raw_decode(text, i)
        except (ValueError, RecursionError):
            i = text.find("{", i + 1)
            continue
        if isinstance(value, dict) and "rows" in value:
            found = value
        i = text.find("{", end)
    return found


def find_json_answer(completion: str) -> JsonAnswer | None:
    text = strip_thinking(completion)
    last_fence = None
    for m in _FENCE.finditer(text):
        if _is_json_fence(m.group("info"), m.group("body")):
            last_fence = m
    if last_fence is not None:
        value, error = _parse(last_fence.group("body"))
        return JsonAnswer("fence", value, error)
    bare = _last_bare_object(_FENCE.sub(" ", text))
    if bare is None:
        return None
    return JsonAnswer("bare", bare)

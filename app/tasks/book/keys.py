"""The keys of a numeric book question: the computed answer (solutions.py), written in the unit
of the book's printed figure. One key per item: where the printed figure lies outside the split
tolerance of the computed one (a slip or a rounding in the book), the annotation says why
(``differs``) and the printed figure is a wrong answer to the served prompt. It becomes a second
key only where the served prompt's own words admit the reading behind it (``admits``)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from app.quantities import parse_quantity
from app.tasks.book.annotations import Annotation, AnnotationError
from app.tasks.book.solutions import solve
from app.tasks.splits import split_spec

# The code that computes the keys: part of the bank's cache key, so that a changed solution,
# formula or hardware figure is never served from a bank cached before the change.
_KEY_CODE = tuple(
    Path(__file__).parents[1] / name
    for name in ("book/keys.py", "book/solutions.py", "formulas.py", "hardware.py", "difficulty.py")
)


def keys_digest() -> str:
    h = hashlib.sha256()
    for path in _KEY_CODE:
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


# Keys are fixed when the bank is built, against the book split's registered default tolerance
# (an operator's override changes how answers are graded, not which figures are keys).
KEY_TOLERANCE = split_spec("book").tolerance
_LEADING_NUMBER = re.compile(r"^\s*[-+]?[\d.,]+(?:e[-+]?\d+)?\s*", re.IGNORECASE)


def within(value: float, reference: float, tolerance: float) -> bool:
    return abs(value - reference) <= tolerance * abs(reference)


@dataclass(frozen=True, slots=True)
class BookKeys:
    computed: tuple[float, ...]  # base units
    gold: tuple[str, ...]  # the computed values, as quantity text
    printed: tuple[str, ...]  # the book's figures, as quantity text
    alternatives: tuple[tuple[str, ...], ...]  # () or (printed,) where the prompt admits it

    @property
    def differing(self) -> list[int]:
        """Positions where the printed figure lies outside the tolerance of the computed one."""
        return [
            i for i, (c, p) in enumerate(zip(self.computed, self.printed, strict=True))
            if not within(parse_quantity(p).value, c, KEY_TOLERANCE)
        ]


def as_quantity_text(value: float, like: str) -> str:
    """value (base units) written in the unit of the quantity text ``like`` ("167 ms")."""
    unit = _LEADING_NUMBER.sub("", like).strip()
    if unit == "%":
        return f"{_number(value * 100)}%"
    if not unit:
        return _number(value)
    factor = parse_quantity(f"1 {unit}").value
    return f"{_number(value / factor)} {unit}"


def _number(value: float) -> str:
    """Whole numbers in full (16896 chips), others to 4 significant figures."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def book_keys(ann: Annotation) -> BookKeys:
    computed = solve(ann.key)
    if len(computed) != len(ann.values):
        raise AnnotationError(f"{ann.key}: the solution gives {len(computed)} values for {len(ann.values)}")
    printed = tuple(v.value for v in ann.values)
    gold = tuple(as_quantity_text(c, p) for c, p in zip(computed, printed, strict=True))
    for text, p in zip(gold, printed, strict=True):
        if parse_quantity(text).dimension != parse_quantity(p).dimension:
            raise AnnotationError(f"{ann.key}: computed key {text!r} and printed {p!r} differ in dimension")
    keys = BookKeys(computed, gold, printed, ())
    if keys.differing:
        if not ann.differs:
            raise AnnotationError(
                f"{ann.key}: the book's figure(s) at position(s) {keys.differing} lie outside "
                f"{KEY_TOLERANCE:g} of the computed answer; say why in `differs`"
            )
        return BookKeys(computed, gold, printed, (printed,) if ann.admits else ())
    if ann.differs:
        raise AnnotationError(f"{ann.key}: `differs` is set but the book's figures agree with the computed answer")
    return keys

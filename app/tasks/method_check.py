"""Does a prompt give its method away? Two checks a reviewer would make by hand.

- **Intermediates.** A solution (book: ``solutions.py``; exam: the oracle) is run under a
  profiler that records every number it computes on the way: the return value of each helper it
  calls and its local variables when it returns. A number the prompt states that equals one of
  those, but is neither a final answer nor a literal input of the solution, is an intermediate
  the solver should have found.
- **Formulas and method phrases.** Text that writes the governing formula (``L(3DF + 4DNH + D)``,
  ``T = B / W``) or names the step that solves the problem ("the slowest one sets the time",
  "the larger of", "is bandwidth-bound") instead of a convention or a datum.

Both return findings; the tests list every prompt with one, so a new leak is seen by name.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import sys
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from app.quantities import find_quantities

# Two or more algebraic symbols joined by an arithmetic operator: "4DNH + 3DF", "B / W", "2BDF".
# Shapes ("D x F matrices", "[B, D]") and units ("FLOP/s", "TB/s") do not match.
_FORMULA = re.compile(r"(?<![\w.])(?:\d*[A-Z]{1,4}\s*[·×*/+]\s*\d*[A-Z]{1,4}\b(?!/s)|\b[A-Z]\(\s*\d*[A-Z]{1,3}\b)")
# Phrases that state how to solve rather than what holds.
_METHOD_PHRASES = re.compile(
    r"\bso the slowest|\bslowest (?:one|stage)|\bthe larger of\b|\bdominates\b|\bdominated by\b|"
    r"\b(?:bandwidth|memory|compute|latency)-bound\b|\bdoubles the bandwidth\b|\bcosts twice\b|"
    r"\bmultiplies the usable bandwidth\b|\btravels both ways\b|\bsends \(N - 1\)/N\b",
    re.IGNORECASE,
)
# "-bound" names the regime a solver must establish, unless the sentence asks for it ("above what
# batch is it compute-bound?") or sets it as a condition ("Assuming the AllGather is
# bandwidth-bound", "Taking the step as memory-bound"): those are the question and a convention.
_REGIME = re.compile(r"-bound\b", re.IGNORECASE)
_ASKED_OR_ASSUMED = re.compile(
    r"\?|\b(?:assum\w*|if|taking|take|what|how|above|below|before|until|stays?|remains?|ideal)\b", re.IGNORECASE
)
_REL = 0.005  # a stated figure within 0.5% of a computed one is that figure
_SMALL = 16.0  # counts below this (2 links, 4 chips, 8 heads) are everywhere as inputs


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # "intermediate", "formula" or "method"
    text: str  # the prompt's words


def formula_findings(text: str) -> list[Finding]:
    found = [Finding("formula", m.group().strip()) for m in _FORMULA.finditer(text)]
    for m in _METHOD_PHRASES.finditer(text):
        if _REGIME.search(m.group()) and _ASKED_OR_ASSUMED.search(_sentence_at(text, m.start())):
            continue
        found.append(Finding("method", m.group()))
    return found


_SENTENCE_END = re.compile(r"[.?!](?=\s|$)")  # not the point of "1.97e14"


def _sentence_at(text: str, pos: int) -> str:
    start = 0
    for m in _SENTENCE_END.finditer(text):
        if m.start() >= pos:
            return text[start : m.end()]
        start = m.end()
    return text[start:]


def _numbers(value: Any) -> Iterable[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if math.isfinite(value):
            yield float(value)
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _numbers(v)


def numbers_in(value: Any) -> set[float]:
    """Every number held by a value (nested dataclasses, dicts, tuples): the data of a table."""
    if hasattr(value, "__dataclass_fields__"):
        return {n for name in value.__dataclass_fields__ for n in numbers_in(getattr(value, name))}
    if isinstance(value, dict):
        return {n for v in value.values() for n in numbers_in(v)}
    return set(_numbers(value))


def _literals(fn: Callable[..., Any]) -> set[float]:
    """Numeric constants written in the solution's source: its inputs, not intermediates."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return set()
    out: set[float] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            out.add(float(node.value))
    return out


def computed_values(fn: Callable[[], Any], inputs: Iterable[float] = ()) -> tuple[set[float], set[float]]:
    """(intermediates, finals) of running ``fn``: every number a called function returned or a
    local held at return, less the final answers, the literals of ``fn``'s own source and the
    given ``inputs`` (data such as spec-table figures and model constants)."""
    seen: set[float] = set()
    target = fn.__code__
    # Only the solution's own module and the shared formulas: a helper that loads a table on
    # first use (and every library below it) would add thousands of unrelated numbers.
    modules = {fn.__module__, "app.tasks.formulas"}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "return" or frame.f_globals.get("__name__") not in modules:
            return
        seen.update(_numbers(arg))
        if frame.f_code is target or (frame.f_back is not None and frame.f_back.f_code is target):
            for value in frame.f_locals.values():
                seen.update(_numbers(value))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        finals = set(_numbers(fn()))
    finally:
        sys.setprofile(previous)
    data = _literals(fn) | set(inputs)
    intermediates = {
        v for v in seen
        if abs(v) >= _SMALL and not any(_close(v, f) for f in finals) and not any(_close(v, d) for d in data)
    }
    return intermediates, finals


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(abs(a), abs(b))


_COMPOUND = re.compile(r"[×x*·/+^()]")  # "16x20x28" is a shape, written as data, not a figure


def intermediate_findings(prompt: str, intermediates: set[float]) -> list[Finding]:
    out = []
    for q in find_quantities(prompt):
        if _COMPOUND.search(q.text.split(" ", 1)[0]):
            continue
        if abs(q.value) >= _SMALL and any(_close(q.value, v) for v in intermediates):
            out.append(Finding("intermediate", q.text))
    return out

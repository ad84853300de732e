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
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FunctionType, ModuleType, SimpleNamespace
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


def computed_values(fn: Callable[..., Any], inputs: Iterable[float] = (),
                    arguments: dict[str, Any] | None = None) -> tuple[set[float], set[float]]:
    """(intermediates, finals) of running ``fn``: every number a helper it calls returned or one
    of its assignments held, less the final answers, the literals of ``fn``'s own source and the
    given ``inputs`` (data such as spec-table figures and model constants). ``arguments`` are
    passed to ``fn`` (a synthetic family's oracle takes its drawn parameters); they count as data.

    No tracer or profiler: on recent Pythons turning one on re-instruments every code object
    loaded (minutes in a process that has imported JAX). Instead the solution's source is
    recompiled with each assignment recorded, and the shared formulas and the module's own
    helpers are called through recording wrappers."""
    seen: set[float] = set()
    kwargs = arguments or {}

    def record(value: Any) -> Any:
        seen.update(_numbers(value))
        return value

    def wrapped(helper: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return record(helper(*args, **kwargs))
        return call

    scope = dict(fn.__globals__)
    for name, value in list(scope.items()):
        if isinstance(value, FunctionType) and value.__module__ == fn.__module__ and value is not fn:
            scope[name] = wrapped(value)
        elif isinstance(value, ModuleType) and value.__name__ == "app.tasks.formulas":
            scope[name] = SimpleNamespace(**{
                k: wrapped(v) if isinstance(v, FunctionType) else v for k, v in vars(value).items()
            })
    scope["__record__"] = record
    compiled = _recording(fn)
    if compiled is None:
        finals = set(_numbers(fn(**kwargs)))
    else:
        namespace: dict[str, Any] = {}
        exec(compiled, scope, namespace)
        finals = set(_numbers(namespace[fn.__name__](**kwargs)))
    data = _literals(fn) | set(inputs) | numbers_in(kwargs)
    intermediates = {
        v for v in seen
        if abs(v) >= _SMALL and not any(_close(v, f) for f in finals) and not any(_close(v, d) for d in data)
    }
    return intermediates, finals


class _RecordAssignments(ast.NodeTransformer):
    """``x = expr`` -> ``x = __record__(expr)`` (and the same for ``x += expr``)."""

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        node.value = ast.Call(ast.Name("__record__", ast.Load()), [node.value], [])
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        node.value = ast.Call(ast.Name("__record__", ast.Load()), [node.value], [])
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        if node.value is not None:
            node.value = ast.Call(ast.Name("__record__", ast.Load()), [node.value], [])
        return node


def _recording(fn: Callable[..., Any]) -> Any:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    func = tree.body[0] if tree.body else None
    if not isinstance(func, ast.FunctionDef):
        return None
    func.decorator_list = []
    func.name = fn.__name__
    tree = ast.fix_missing_locations(_RecordAssignments().visit(tree))
    return compile(tree, inspect.getsourcefile(fn) or "<solution>", "exec")


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

"""How many steps a numeric item asks for, read from the code that solves it.

A step is one arithmetic operation or one numeric function (``min``, ``max``, ``ceil``,
``sqrt``...) in the solution (a book item's solution, an exam item's oracle) or in the helpers it
calls from the shared formulas, counted once per place in the source. It is a measure of what the
solver must find, not of the solution's length in lines: ``fm.critical_batch(c, w, 1)`` is the
two operations of ``c / w / 2``, a derivation of the KV cache size its five multiplications.
The tag groups items as ``easy`` (at most 3 steps), ``medium`` (4 to 8) or ``hard`` (9 or more).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from functools import lru_cache
from types import FunctionType, ModuleType
from typing import Any

_NUMERIC_CALLS = frozenset({"min", "max", "ceil", "floor", "sqrt", "log", "log2", "exp", "round", "sum"})
EASY_AT_MOST, MEDIUM_AT_MOST = 3, 8
_MAX_DEPTH = 6  # helpers calling helpers: the shared formulas nest two or three deep


def difficulty_tags(fn: Callable[..., Any]) -> dict[str, int | str]:
    """The task metadata: ``steps`` and ``difficulty``."""
    steps = count_steps(fn)
    return {"steps": steps, "difficulty": difficulty(steps)}


def difficulty(steps: int) -> str:
    if steps <= EASY_AT_MOST:
        return "easy"
    return "medium" if steps <= MEDIUM_AT_MOST else "hard"


def count_steps(fn: Callable[..., Any]) -> int:
    """At least 1: every numeric item asks for something computed."""
    return max(1, _steps(fn, 0, frozenset()))


def _steps(fn: Callable[..., Any], depth: int, seen: frozenset[int]) -> int:
    if not isinstance(fn, FunctionType) or id(fn) in seen or depth > _MAX_DEPTH:
        return 0
    tree = _tree(fn)
    if tree is None:
        return 0
    seen = seen | {id(fn)}
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            total += 1
        elif isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name in _NUMERIC_CALLS:
                total += 1
            helper = _resolve(fn, node.func)
            if helper is not None:
                total += _steps(helper, depth + 1, seen)
    return total


@lru_cache(maxsize=1024)
def _source(fn: FunctionType) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None


def _tree(fn: FunctionType) -> ast.AST | None:
    source = _source(fn)
    if source is None:
        return None
    tree = ast.parse(source)
    body = tree.body[0] if tree.body else None
    if isinstance(body, ast.FunctionDef):
        body.decorator_list = []  # "@solves(...)" and "@numeric(...)" hold no steps
    return tree


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _resolve(fn: FunctionType, func: ast.expr) -> FunctionType | None:
    """The project function a call names (``fm.x``, a module-level helper), else None."""
    scope = fn.__globals__
    target: Any = None
    if isinstance(func, ast.Name):
        target = scope.get(func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = scope.get(func.value.id)
        if isinstance(owner, ModuleType):
            target = getattr(owner, func.attr, None)
    if isinstance(target, FunctionType) and target.__module__.startswith("app.tasks"):
        return target
    return None

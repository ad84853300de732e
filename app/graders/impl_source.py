"""Find the submitted code in a completion, and the optional AST deny-list.

The deny-list is defence in depth only: it rejects the obvious (importing sockets, subprocesses,
ctypes) early and cheaply, and anyone can get round it (``__import__("so" + "cket")``). The
sandbox is what actually contains a submission."""

from __future__ import annotations

import ast

from app.graders.completion import fences, strip_thinking

_PYTHON_LABELS = ("", "python", "py", "python3")
DENIED_MODULES = frozenset({
    "socket", "ssl", "subprocess", "multiprocessing", "ctypes", "cffi", "pty", "asyncio",
    "http", "urllib", "requests", "httpx", "ftplib", "smtplib", "telnetlib", "signal", "resource",
})


def defines(source: str, entry: str) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry for n in tree.body)


def extract_code(completion: str, entry: str) -> str | None:
    """The last fenced block (python or unlabelled) that defines entry; failing that, the last
    such block at all, or the whole completion if it is itself code defining entry."""
    text = strip_thinking(completion)  # code in an unfinished thinking trace was never submitted
    blocks = [f.body for f in fences(text) if f.label.lower() in _PYTHON_LABELS]
    for block in reversed(blocks):
        if defines(block, entry):
            return block
    if blocks:
        return blocks[-1]
    return text if defines(text, entry) else None


def denied_imports(source: str) -> list[str]:
    """Modules on the deny-list that the source imports by name (empty if it does not parse:
    the child then reports the syntax error as the case's exception)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found.update(n for n in names if n.split(".")[0] in DENIED_MODULES)
    return sorted(found)

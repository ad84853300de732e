"""scaling_book talks to the service over HTTP only: importing it, and every module of it, in a
fresh interpreter brings in no module of the service (``app``, ``worker``), though the service is
importable right beside it; and no import statement anywhere in it, at module top or inside a
function, names one."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "scaling_book"
SERVICE = ("app", "worker")
# Modules that import verifiers (an optional extra) when imported themselves.
NEEDS_VERIFIERS = {"verifiers_v1"}


def _modules() -> list[str]:
    return ["scaling_book", *(f"scaling_book.{p.stem}" for p in sorted(PACKAGE.glob("*.py"))
                              if p.stem != "__init__" and p.stem not in NEEDS_VERIFIERS)]


def test_importing_every_module_imports_nothing_of_the_service() -> None:
    probe = (
        "import importlib, json, sys\n"
        "import app  # importable here: the check is that scaling_book does not import it\n"
        "del sys.modules['app']\n"
        f"for name in {_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {SERVICE!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []


def _imported_roots(source: str) -> set[str]:
    """The top-level names every import of ``source`` reaches, wherever it stands."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            roots.add(str(node.args[0].value).split(".")[0])
    return roots


def test_no_import_anywhere_in_the_package_names_the_service() -> None:
    offenders = {p.name: sorted(_imported_roots(p.read_text(encoding="utf-8")) & set(SERVICE))
                 for p in sorted(PACKAGE.glob("*.py"))}
    assert not {name: roots for name, roots in offenders.items() if roots}


def test_the_import_reader_sees_imports_inside_functions() -> None:
    # The check above must not pass by reading only module-top imports.
    source = ("def f():\n    from app.integrations import grading\n"
              "def g():\n    import worker.main\n    importlib.import_module('app.main')\n")
    assert _imported_roots(source) == {"app", "worker"}

"""Imports run one way: entry points -> api/adapters -> grading -> jobs, graders -> tasks,
sandbox -> base modules. Every import counts, at module top, inside a function or under
TYPE_CHECKING: a circle hidden in a function is still a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package (or module) -> what it must never import
NEVER: dict[str, tuple[str, ...]] = {
    "app.grading": ("app.api", "app.integrations", "app.client", "app.commands", "app.evaluation", "app.main",
                    "worker"),
    "app.jobs": ("app.grading", "app.api", "app.integrations", "app.commands", "app.main", "worker"),
    "app.graders": ("app.grading", "app.api", "app.jobs", "app.integrations", "app.commands", "app.main",
                    "worker", "app.tasks.registry", "app.tasks.impl.exercises"),
    "app.tasks": ("app.graders", "app.grading", "app.api", "app.jobs", "app.integrations", "app.commands",
                  "app.main", "worker"),
    "app.sandbox": ("app.graders", "app.grading", "app.api", "app.jobs", "app.tasks", "app.integrations",
                    "app.commands", "app.main", "worker"),
    "app.api.rewards": ("app.integrations",),
    "app.ratelimit": ("app.jobs",),
    "app.quantities": ("app.graders", "app.tasks"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


SOURCES = sorted([*ROOT.glob("app/**/*.py"), *ROOT.glob("worker/**/*.py")])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_runs_against_the_layers(path: Path) -> None:
    module = module_name(path)
    rules = [banned for owner, banned in NEVER.items() if within(module, owner)]
    wrong = sorted(name for name in imported(path) for banned in rules for b in banned if within(name, b))
    assert wrong == [], f"{module} imports {wrong}"


def test_the_rules_name_real_modules() -> None:
    # A rule about a package that was renamed away would pass forever.
    modules = {module_name(p) for p in SOURCES}
    for owner in NEVER:
        assert any(within(m, owner) for m in modules), owner

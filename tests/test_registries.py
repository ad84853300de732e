"""Splits and grading kinds are listed once, in their registries (app/tasks/splits.py and
app/graders/kinds.py): no other module of the service spells out a list of them, so adding one is
a single registration, and every registered one is documented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from app.graders.kinds import grading_kinds
from app.tasks.splits import split_names, split_spec

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES = {ROOT / "app" / "tasks" / "splits.py", ROOT / "app" / "graders" / "kinds.py"}
SOURCES = sorted(p for p in [*ROOT.glob("app/**/*.py"), *ROOT.glob("worker/**/*.py")] if p not in REGISTRIES)
NAME_SETS = {"splits": frozenset(split_names()), "grading kinds": frozenset(grading_kinds())}


def _strings(nodes: list[ast.expr]) -> list[str] | None:
    if len(nodes) < 2 or not all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in nodes):
        return None
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def listed_names(source: str) -> list[tuple[int, list[str], bool]]:
    """Every literal collection of two or more strings (a list, tuple or set, the arguments of a
    ``Literal[...]``, a comma-separated string such as a command-line default, a dict's keys), with
    its line and whether it is a dict."""
    found = []
    for node in ast.walk(ast.parse(source)):
        values, is_dict = None, False
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            values = _strings(node.elts)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\w+(,\w+)+", node.value):
            values = node.value.split(",")
        elif isinstance(node, ast.Dict):
            values, is_dict = _strings([k for k in node.keys if k is not None]), True
        if values is not None:
            found.append((node.lineno, values, is_dict))
    return found


def hard_coded_lists(source: str) -> list[str]:
    """Collections of registered names and nothing else. A dict counts when it is keyed by every
    one (a copy of the registry): one keyed by some of them holds what is particular to those."""
    wrong = []
    for line, values, is_dict in listed_names(source):
        for what, names in NAME_SETS.items():
            if set(values) == names if is_dict else (len(set(values)) >= 2 and set(values) <= names):
                wrong.append(f"line {line}: a list of {what} {values}")
    return wrong


def test_the_contract_finds_the_lists_it_forbids() -> None:
    # The shapes the registries replaced: a Literal of kinds, the inline and queued kinds, a
    # worker's default queues, a map of split loaders.
    old = '''GradingKind = Literal["numeric", "judge", "impl", "rows"]
INLINE_KINDS = frozenset({"numeric", "rows"})
QUEUES = ("impl", "judge")
p.add_argument("--queues", default="impl,judge")
SPLIT_LOADERS = {"synthetic": a, "book": b, "tasks": c, "exam": d, "impl": e}
'''
    assert len(hard_coded_lists(old)) == 5
    # ...and not what is particular to some of them, nor a list that only shares a name with them
    assert hard_coded_lists('AUDITS = {"book": a, "exam": b}\nx = ("numeric", "judge", "exclude")\n') == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_lists_the_splits_or_the_grading_kinds(path: Path) -> None:
    assert hard_coded_lists(path.read_text(encoding="utf-8")) == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("split", split_names())
def test_every_split_is_documented(split: str) -> None:
    page, _, anchor = split_spec(split).docs.partition("#")
    text = (ROOT / page).read_text()
    if anchor:
        headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
        assert anchor in headings, f"{page} has no section #{anchor}"
    assert f"| `{split}` |" in (ROOT / "docs" / "splits.md").read_text(), "docs/splits.md's table leaves it out"


@pytest.mark.parametrize("kind", grading_kinds())
def test_every_grading_kind_is_documented(kind: str) -> None:
    assert f"| `{kind}` |" in (ROOT / "docs" / "grading.md").read_text(), "docs/grading.md's table leaves it out"

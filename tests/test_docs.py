"""The README and docs/ stay true: every setting documented, no stale names, no broken links,
nothing pointing outside the repository, and a README short enough to read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.settings import CLIENT_VARIABLES, ENV_PREFIX, Settings, _variable_names

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CONFIG = REPO / "docs" / "configuration.md"


def _settings_variables() -> set[str]:
    groups = {ENV_PREFIX + name.upper() for name, f in Settings.model_fields.items()
              if isinstance(f.annotation, type) and hasattr(f.annotation, "model_fields")}
    return _variable_names(Settings, ENV_PREFIX) - groups


def test_every_setting_is_documented() -> None:
    text = CONFIG.read_text()
    missing = sorted(name for name in _settings_variables() if f"`{name}`" not in text)
    assert not missing, f"docs/configuration.md does not document {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_names_a_setting_that_does_not_exist(page: Path) -> None:
    known = _variable_names(Settings, ENV_PREFIX) | CLIENT_VARIABLES
    named = set(re.findall(r"SCALING_GRADER_[A-Z0-9_]*[A-Z0-9]", page.read_text()))
    stale = sorted(n for n in named if n not in known and not any(k.startswith(n + "__") for k in known))
    assert not stale, f"{page.name} names settings that do not exist: {stale}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve_inside_the_repository(page: Path) -> None:
    text = page.read_text()
    assert "../shared" not in text and "DESIGN.md" not in text
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        assert (page.parent / target).resolve().exists(), f"{page.name} links to missing {target}"


def test_readme_is_short_and_shows_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "make serve" in text and "make test" in text


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    unlinked = [p.name for p in sorted((REPO / "docs").glob("*.md")) if f"(docs/{p.name})" not in readme]
    assert not unlinked, f"pages the README does not link: {unlinked}"

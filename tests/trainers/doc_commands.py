"""The command lines docs/trainers.md shows, read from the page itself: each sits in the first
fenced block after a `<!-- command: NAME -->` marker, so the tests run what users copy."""

from __future__ import annotations

import re
import shlex

from tests.support.server import ROOT

PAGE = ROOT / "docs" / "trainers.md"


def command(name: str) -> str:
    text = PAGE.read_text()
    found = re.search(rf"<!-- command: {re.escape(name)} -->\s*```\w*\n(.*?)```", text, re.S)
    assert found, f"docs/trainers.md has no command block named {name!r}"
    return found.group(1)


def words(name: str) -> list[str]:
    """The block's one command (not its `export` lines) as shell words, continuations joined."""
    lines = [line.rstrip().removesuffix("\\") for line in command(name).splitlines()
             if line.strip() and not line.lstrip().startswith(("#", "export "))]
    return shlex.split(" ".join(lines), comments=True)


def exports(name: str) -> dict[str, str]:
    """The `export NAME=value` lines of the block."""
    out: dict[str, str] = {}
    for line in command(name).splitlines():
        if line.startswith("export "):
            for pair in shlex.split(line[len("export "):], comments=True):
                key, _, value = pair.partition("=")
                out[key] = value
    return out

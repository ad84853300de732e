"""The benchmark page: one section per benchmark, written from what the benchmark printed.

Sections are delimited by HTML comments so a run of one benchmark replaces its own section and
leaves the others as they were measured."""

from __future__ import annotations

import re
from pathlib import Path

HEADER = """# Benchmarks

Every figure on this page was printed by a benchmark run: `python -m bench --record docs/benchmarks.md
[name ...]` rewrites the section of each benchmark it runs, and nothing here is typed by hand. Each
benchmark measures its baseline in the same run and prints the ratio, because absolute times on a
shared machine are not comparable from one run to the next. CI runs `python -m bench --smoke`, which
only proves that every benchmark still works (its figures mean nothing and are never recorded).
"""


def render_section(name: str, doc: str, output: str, when: str, machine: str, seconds: float) -> str:
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    summary = " ".join(doc.split())
    lines = [line.rstrip() for line in output.strip("\n").splitlines()]
    body = "\n".join(lines) if lines else "(no output)"
    return (
        f"{begin}\n## `{name}`\n\n{summary}\n\n"
        f"Run {when} on {machine}, {seconds:.0f} s:\n\n```\n{body}\n```\n{end}\n"
    )


_SECTION = re.compile(r"<!-- bench:([\w.]+) -->.*?<!-- /bench:\1 -->\n?", re.S)


def update_page(page: Path, name: str, section: str) -> None:
    """Replace ``name``'s section in ``page`` where it stands, leaving the text around it (notes
    written between sections) as it is; a new section goes before the first section whose name
    sorts after its own, or at the end."""
    text = page.read_text() if page.exists() else HEADER
    section = section.rstrip("\n") + "\n"
    found = {m.group(1): m for m in _SECTION.finditer(text)}
    if name in found:
        old = found[name]
        text = text[: old.start()] + section + text[old.end():]
    else:
        later = [m for key, m in sorted(found.items()) if key > name]
        if later:
            at = later[0].start()
            text = text[:at] + section + "\n" + text[at:]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)

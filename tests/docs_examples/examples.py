"""The runnable examples of the README and docs/api.md, read from the pages themselves.

A page shows a request as a ``curl`` command in a fenced block (a trailing backslash continues
it), and what the service answers as the comment after it, ``# answers {"field": value, ...}``;
an error reply is shown as a ``json`` block after a sentence ending "`METHOD /path` answers:"."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
ANSWERS = "# answers "
# "field": value pairs of a shown answer; the "..." standing for the fields left out is skipped.
SHOWN_FIELD = re.compile(r'"(\w+)":\s*("(?:[^"\\]|\\.)*"|-?[\d.]+(?:e-?\d+)?|true|false|null)')
ANSWERED_ERROR = re.compile(r"`(GET|POST|PUT|DELETE) (/[^`\s]*)` answers:\s*```json\n(.*?)```", re.S)


@dataclass(frozen=True)
class CurlExample:
    page: str
    argv: tuple[str, ...]
    shown: dict[str, object]  # the fields the page says the answer holds (empty: none shown)


@dataclass(frozen=True)
class ErrorExample:
    page: str
    method: str
    path: str
    body: dict[str, object]


def _commands(block: str) -> list[tuple[str, str]]:
    """(command, the comment line that follows it or '') for each command of a shell block."""
    lines = block.replace("\\\n", " ").splitlines()
    out: list[tuple[str, str]] = []
    for i, line in enumerate(lines):
        if line.strip() and not line.lstrip().startswith("#"):
            after = lines[i + 1].strip() if i + 1 < len(lines) else ""
            out.append((line.strip(), after))
    return out


def shown_fields(comment: str) -> dict[str, object]:
    if not comment.startswith(ANSWERS):
        return {}
    return {name: json.loads(value) for name, value in SHOWN_FIELD.findall(comment[len(ANSWERS):])}


def curl_examples(page: Path) -> list[CurlExample]:
    found = []
    for _lang, block in FENCE.findall(page.read_text()):
        for command, comment in _commands(block):
            if command.startswith("curl "):
                found.append(CurlExample(page.name, tuple(shlex.split(command)), shown_fields(comment)))
    return found


def error_examples(page: Path) -> list[ErrorExample]:
    return [ErrorExample(page.name, method, path, json.loads(body))
            for method, path, body in ANSWERED_ERROR.findall(page.read_text())]


def posted_task_id(example: CurlExample) -> str | None:
    """The task id a grading example sends, if any."""
    argv = list(example.argv)
    if "-d" not in argv:
        return None
    body = json.loads(argv[argv.index("-d") + 1])
    return body.get("task_id") if isinstance(body, dict) else None

"""``scaling-grader book``: the book split's size (numeric and judge per chapter) and every
excluded question with its reason, as the code finds them; the README pastes this output."""

from __future__ import annotations

import argparse
import json

from app.settings import get_settings
from app.tasks.book.bank import load_bank, parse_bank, summary
from app.tasks.book.source import BookSourceError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("book", help="summarise the book split (size, kinds, exclusions)")
    p.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    p.add_argument("--refresh", action="store_true", help="parse the verified source again")
    p.set_defaults(func=run)


def render(s: dict) -> str:
    lines = [
        f"Book split: {s['size']} tasks ({s['grading'].get('numeric', 0)} numeric, "
        f"{s['grading'].get('judge', 0)} judge); {len(s['exclusions'])} questions excluded.",
        "",
        "| chapter | question markers | numeric | judge | excluded |",
        "|---|---:|---:|---:|---:|",
    ]
    totals = [0, 0, 0, 0]
    for chapter, c in s["chapters"].items():
        row = [c["markers"], c["numeric"], c["judge"], c["excluded"]]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        lines.append(f"| {chapter} | " + " | ".join(map(str, row)) + " |")
    lines.append("| **total** | " + " | ".join(f"**{t}**" for t in totals) + " |")
    lines += ["", "| excluded | source | reason |", "|---|---|---|"]
    for e in s["exclusions"]:
        lines.append(f"| `{e['id']}` | {e['label']}, {e['chapter']}.md line {e['line']} | {e['reason']} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    try:
        bank = parse_bank(settings) if args.refresh else load_bank(settings)
    except BookSourceError as exc:
        print(f"error: {exc}")
        return 2
    s = summary(bank)
    print(json.dumps(s, indent=2) if args.json else render(s))
    return 0

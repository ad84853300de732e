"""``scaling-grader coverage``: the coverage map (key-content items x splits) as a Markdown table
or JSON. With --strict, exit 1 when an item has no task in any split (for CI once every split
exists)."""

from __future__ import annotations

import argparse
import json
import sys

from app.settings import get_settings
from app.tasks.coverage import compute_coverage, render_markdown
from app.tasks.registry import split_names


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("coverage", help="tasks per split for every key-content item")
    p.add_argument("--split", action="append", dest="splits", metavar="NAME",
                   help="count only this split (repeatable; default: every registered split)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any item is uncovered (items whose only tasks are mis-tagged count as uncovered)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    unknown = sorted(set(args.splits or ()) - set(split_names()))
    if unknown:  # a typo must not print a map that says everything is uncovered
        print(f"unknown split {unknown[0]!r}; known: {', '.join(split_names())}", file=sys.stderr)
        return 2
    cov = compute_coverage(get_settings(), args.splits)
    print(json.dumps(cov.as_dict(), indent=2) if args.json else render_markdown(cov))
    if args.strict and cov.covered_only_by_mistagged():
        print("covered only by mis-tagged tasks: " + ", ".join(cov.covered_only_by_mistagged()), file=sys.stderr)
    return 1 if args.strict and (cov.uncovered() or cov.unavailable) else 0

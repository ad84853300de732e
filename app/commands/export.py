"""``scaling-grader export``: write a split to files with a dataset card."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXPORTABLE = ("tasks",)


def run(args: argparse.Namespace) -> int:
    from app.tasks.rows.export import ExportUnavailable, export

    if args.split not in EXPORTABLE:
        print(f"export supports the split(s): {', '.join(EXPORTABLE)}", file=sys.stderr)
        return 2
    try:
        paths = export(Path(args.out), args.format)
    except ExportUnavailable as exc:
        print(str(exc), file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="write a split and its dataset card to a directory")
    p.add_argument("--split", default="tasks", help=f"split to export ({', '.join(EXPORTABLE)})")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    p.add_argument("--out", default="export/tasks", help="output directory (created if missing)")
    p.set_defaults(func=run)

"""``scaling-grader audit``: re-derive every numeric key of every finite split (book, exam,
tasks) from code and print the disagreements; exit 1 if there is any."""

from __future__ import annotations

import argparse
import json
import sys

from app.commands.audit_keys import AUDITS, audit
from app.settings import get_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("audit", help="re-derive every numeric key from code and list disagreements")
    p.add_argument("--split", action="append", dest="splits", metavar="NAME",
                   help=f"audit only this split (repeatable; one of {', '.join(AUDITS)}; default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    unknown = sorted(set(args.splits or ()) - set(AUDITS))
    if unknown:
        print(f"cannot audit split {unknown[0]!r}; auditable: {', '.join(AUDITS)}", file=sys.stderr)
        return 2
    results = audit(get_settings(), args.splits)
    total = sum(len(r.disagreements) for r in results)
    if args.json:
        print(json.dumps({
            "disagreements": total,
            "splits": {r.split: {"keys": r.keys, "disagreements": [
                {"task_id": d.task_id, "detail": d.detail} for d in r.disagreements]} for r in results},
        }, indent=1))
    else:
        for r in results:
            for d in r.disagreements:
                print(f"DISAGREE {d.task_id}: {d.detail}")
        for r in results:
            print(f"{r.split}: {r.keys} keys re-derived from code, {len(r.disagreements)} disagreements")
        print(f"total: {total} disagreements")
    return 1 if total else 0

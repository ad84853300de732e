"""``scaling-grader tasks``: print a batch of public task views as JSON lines."""

from __future__ import annotations

import argparse
import json
import sys

from app.commands import bank_or_complain
from app.commands.tasks_verify import add_verify
from app.tasks.base import parse_chapters


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tasks", help="print a batch of tasks as JSON lines")
    p.add_argument("--split", default="synthetic")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-n", type=int, default=16)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--chapters", help="comma-separated chapter filter")
    p.set_defaults(func=run)
    add_verify(p.add_subparsers(dest="tasks_command"))


def run(args: argparse.Namespace) -> int:
    if args.n < 1 or args.seed < 0 or args.offset < 0:
        print("n must be positive; seed and offset non-negative", file=sys.stderr)
        return 2
    bank = bank_or_complain(args.split, "tasks")
    if bank is None:
        return 2
    chapters = parse_chapters(args.chapters)
    for task in bank.batch(seed=args.seed, n=args.n, offset=args.offset, chapters=chapters):
        sys.stdout.write(json.dumps(task.public()) + "\n")
    return 0

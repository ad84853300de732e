"""``scaling-grader exam-summary``: the exam bank's size by chapter and grading kind, and its
coverage of the key-content items, as Markdown (the README table is this command's output)."""

from __future__ import annotations

import argparse

from app.tasks.exam.bank import build_tasks, summary_markdown


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("exam-summary", help="exam bank size by chapter and grading kind")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(summary_markdown(build_tasks(None, resolve=False)))
    return 0

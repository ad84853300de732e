"""``scaling-grader worker``: run an RQ worker for queued grading."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("worker", help="run an RQ worker (needs SCALING_GRADER_REDIS_URL)")
    p.add_argument("--queues", default="impl,judge", help="comma-separated queues to serve")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    p.add_argument("--name", help="worker name (default: RQ's)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.settings import get_settings
    from worker.main import run as run_worker

    queues = tuple(q for q in args.queues.split(",") if q)
    return run_worker(get_settings(), queues, burst=args.burst, name=args.name)

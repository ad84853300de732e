"""``scaling-grader worker``: run RQ workers for queued grading, one process per job at once."""

from __future__ import annotations

import argparse

from app.graders.kinds import queue_names
from app.settings import get_settings
from worker.main import run as run_worker


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("worker", help="run an RQ worker (needs SCALING_GRADER_REDIS_URL)")
    p.add_argument("--queues", help="comma-separated queues to serve (default: every queued grading kind's)")
    p.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    p.add_argument("--name", help="worker name (default: random); lanes after the first add -2, -3, ...")
    p.add_argument("--jobs", type=int, help="jobs run at once, each in a lane of its own (default: "
                   "SCALING_GRADER_QUEUE__WORKER_JOBS; 0: the cores this process is given)")
    p.add_argument("--metrics-port", type=int, help="serve this worker's Prometheus metrics on this port")
    p.add_argument("--metrics-host", default="127.0.0.1", help="bind address for --metrics-port")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    queues = tuple(q for q in args.queues.split(",") if q) if args.queues else queue_names()
    if args.jobs is not None and args.jobs < 0:
        raise SystemExit("--jobs must be 0 (one per core) or more")
    settings = get_settings()
    if args.jobs is not None:  # the flag stands for QUEUE__WORKER_JOBS
        settings = settings.model_copy(update={"queue": settings.queue.model_copy(update={"worker_jobs": args.jobs})})
    # Grades run in the workers, not in the API: scrape each worker for its grade counts and latencies.
    metrics = (args.metrics_port, args.metrics_host) if args.metrics_port is not None else None
    return run_worker(settings, queues, burst=args.burst, name=args.name, metrics=metrics)

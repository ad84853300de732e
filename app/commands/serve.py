"""``scaling-grader serve``: run the API with uvicorn."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ipaddress
import os
import signal
import sys
from types import FrameType

import uvicorn
from fastapi import FastAPI

from app.api.http_limits import BoundedHttpTools
from app.main import create_app
from app.metrics_scrape import remove_shared_directory, share_between_processes
from app.sandbox.pool import shutdown_all
from app.sandbox.stop import plain_tier_error, remove_stale_leftovers
from app.settings import get_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run the HTTP API")
    p.add_argument("--host", help="bind address (default: settings, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: settings, 8000)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=run)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    # Flags become settings so that every uvicorn worker process builds the same app.
    if args.host:
        os.environ["SCALING_GRADER_HOST"] = args.host
    if args.port is not None:
        os.environ["SCALING_GRADER_PORT"] = str(args.port)
    get_settings.cache_clear()
    settings = get_settings()
    if settings.tenants_file is None and not is_loopback(settings.host):
        print("refusing to bind a non-loopback address without a tenants file: anyone could grade and "
              "run code here. Set SCALING_GRADER_TENANTS_FILE (see README: Tenants), or bind 127.0.0.1.",
              file=sys.stderr)
        return 2
    if args.workers > 1 and not settings.redis_url:
        # Embedded jobs and idempotency keys live in one process: a second worker process would
        # answer 404 for jobs the first one holds.
        print("several --workers need SCALING_GRADER_REDIS_URL: in embedded mode queued jobs live in one "
              "process. Run one worker, or set the Redis URL.", file=sys.stderr)
        return 2
    if not settings.redis_url:  # embedded: submitted code runs in this process's sandboxes
        remove_stale_leftovers()
        refusal = plain_tier_error(settings)
        if refusal:
            print(f"refusing to start: {refusal}", file=sys.stderr)
            return 2
    factory = "app.main:create_app"
    if args.workers > 1:
        share_between_processes()  # /metrics adds up the processes' figures
        os.environ[SUPERVISOR_ENV] = str(os.getpid())
        factory = "app.commands.serve:supervised_app"
    install_stop_cleanup()
    uvicorn.run(factory, factory=True, host=settings.host, port=settings.port,
                workers=args.workers, log_level=args.log_level, access_log=False,
                http=BoundedHttpTools,  # a request's head bounded in size and time (app/api/http_limits.py)
                # With several processes uvicorn's supervisor restarts one that has not answered its
                # ping within this many seconds, starting up included: its 5 s default, on a loaded
                # host, killed every process mid-start over and over, and the API never came up.
                timeout_worker_healthcheck=60)
    return 0


# The supervisor's pid, for the API processes it starts (they are spawned: the environment is
# what reaches them).
SUPERVISOR_ENV = "_SCALING_GRADER_SERVE_SUPERVISOR_PID"  # no setting: not SCALING_GRADER_-prefixed
_PR_SET_PDEATHSIG = 1


def supervised_app() -> FastAPI:
    """The app of one of uvicorn's worker processes, which ends when its supervisor (the serve
    command) dies, however it dies: uvicorn's workers would otherwise go on serving the port,
    orphaned, with their grading processes. SIGTERM, so that it stops as on a stop of the command:
    its grading processes reaped and its last grade counts written."""
    supervisor = os.environ.get(SUPERVISOR_ENV)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if supervisor and os.getppid() != int(supervisor):  # it died before the signal was set
        os._exit(1)
    return create_app()


def install_stop_cleanup() -> None:
    """uvicorn handles SIGTERM/SIGINT itself and, once it has shut down, raises the signal
    again with the handlers found at start: these. So atexit never runs on a stop; this removes
    the sandbox's children, staging and case directories and control groups, then lets the
    signal end the process as it would have."""

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        shutdown_all()
        remove_shared_directory()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_stop)

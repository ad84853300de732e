"""One lane: a process that runs one RQ worker (worker.grading_worker) in its main thread.

Started by the worker process (worker.lanes) as ``python -m worker.lane``; never by hand. The
lane runs RQ's own work loop with RQ's own signal handling (a first SIGINT or SIGTERM: stop after
the job in hand; the worker process turns a second one into a kill, worker.lanes). It dies with
the worker process that started it (the kernel's parent-death signal), so a killed worker leaves
no lane behind to finish a job another worker is re-running.

A lane whose RQ loop quit because Redis went away waits for Redis (up to OUTAGE_SECONDS) and
works again under the same name; any other end of the loop ends the lane, and the worker process
then stops the others (worker.lanes)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from typing import Any

from rq.exceptions import StopRequested

from app.extensions import load_extensions
from app.graders.impl import sandbox_status
from app.graders.judge import warm_clients
from app.jobs import presence
from app.redis_link import REDIS_ERRORS
from app.sandbox.pool import shutdown_all
from app.settings import get_settings
from worker.grading_worker import GradingWorker, build_worker

log = logging.getLogger(__name__)
OUTAGE_SECONDS = 600  # a lane waits this long for an unreachable Redis before it gives up
_PR_SET_PDEATHSIG = 1


class QuietMaintenance(logging.Filter):
    """Maintenance runs every few seconds here (RQ's default is minutes); its per-queue INFO line
    would fill the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)  # RQ 3: "cleaning registries for queue", "cleaning group registries"
        return not ("cleaning" in message and "registries" in message)


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL this lane when the worker process that started it dies (Linux), and leave at once
    if it died before this could be set."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _reachable(connection: Any) -> bool:
    try:
        return bool(connection.ping())
    except REDIS_ERRORS:
        return False


def _wait_for_redis(worker: GradingWorker) -> bool:
    """True once Redis answers again; False if it stayed away OUTAGE_SECONDS."""
    log.warning("lane %s: Redis is unreachable; waiting up to %d s for it", worker.name, OUTAGE_SECONDS)
    deadline = time.monotonic() + OUTAGE_SECONDS
    pause = 0.5
    while not _reachable(worker.connection):
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(2 * pause, 5.0)
    with contextlib.suppress(*REDIS_ERRORS):  # its registration may have outlived the outage
        worker.register_death()
    log.info("lane %s: Redis is back; working again", worker.name)
    return True


def work(worker: GradingWorker, burst: bool) -> int:
    """RQ's work loop until it ends for good: 0 when it ended as asked (a stop, a finished burst,
    even with Redis away) or on its own with Redis up; 1 when Redis stayed away."""
    try:
        while True:
            try:
                worker.work(burst=burst, with_scheduler=False, logging_level="INFO")
            except REDIS_ERRORS:  # from RQ's own bookkeeping outside its retried dequeue
                log.warning("lane %s lost Redis", worker.name)
            if burst or worker.stop_asked or _reachable(worker.connection):
                return 0
            if not _wait_for_redis(worker):
                return 1
    except StopRequested:  # RQ's signal handler, when a stop comes outside RQ's loop
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.lane")
    parser.add_argument("--name", required=True)
    parser.add_argument("--queues", required=True)
    parser.add_argument("--lane", type=int, default=1)
    parser.add_argument("--lanes", type=int, default=1)
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--parent", type=int, help="the pid of the worker process that started the lane")
    args = parser.parse_args(argv)
    _die_with_parent(args.parent)
    load_extensions()  # a lane is a fresh interpreter: the registrations its worker holds, again
    if not logging.getLogger().handlers:  # RQ configures only its own logger, in work()
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("rq.worker").addFilter(QuietMaintenance())
    settings = get_settings()
    queues = tuple(q for q in args.queues.split(",") if q)
    worker = build_worker(settings, queues, args.name)
    sandbox = None
    try:
        if "impl" in queues:
            # Probe the isolation tiers and start the warm pool before taking the first job, and say
            # which tier and which case limits are in force.
            sandbox = sandbox_status(settings)
            log.info("lane %s: sandbox tier %s (minimum %s), case limits %s, at most %d cases at once; "
                     "probes: %s", worker.name, sandbox["tier"], sandbox["min_tier"], sandbox.get("limits"),
                     settings.sandbox.max_concurrent_cases, sandbox["probes"])
            if not sandbox["meets_min_tier"]:
                log.error("lane %s: sandbox tier %s is below the required minimum %s: impl jobs will be "
                          "refused (sandbox_error), not run in a weaker sandbox", worker.name, sandbox["tier"],
                          sandbox["min_tier"])
            worker.sandbox_tier = sandbox.get("tier") or "unavailable"
        if "judge" in queues:
            log.info("lane %s: judge clients ready for %d allow-listed endpoints", worker.name,
                     warm_clients(settings.judge))
        worker.presence = presence.record(worker.name, queues, sandbox, lane=args.lane, lanes=args.lanes)
        return work(worker, args.burst)
    finally:
        shutdown_all()


if __name__ == "__main__":
    sys.exit(main())

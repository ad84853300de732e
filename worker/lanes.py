"""One worker process, several jobs at once: lanes.

Each lane is an RQ worker of its own run in a thread of this process: registered in Redis under
its own name (NAME, NAME-2, ...), with its own heartbeats, so that each job a killed process held
is found abandoned and re-queued as before, and the status page shows what every lane holds. The
lanes share the process's sandbox: one warm pool and fork server per tier, and one cap on the
cases running at once (SANDBOX__MAX_CONCURRENT_CASES).

Signals reach the main thread only; it runs no job and forwards them. A first SIGINT or SIGTERM
asks every lane to stop after the job it holds (warm stop); another one, a second or more later,
ends the process at once (cold stop): the lanes are deregistered and the jobs in flight are left
to be re-queued by another worker, exactly as after a kill, rather than finished with cases cut
short (which would write a wrong result)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from types import FrameType
from typing import Any, Protocol

from app.redis_link import REDIS_ERRORS

log = logging.getLogger(__name__)
OUTAGE_SECONDS = 600  # a lane waits this long for an unreachable Redis before the process gives up
_REPEAT_SIGNAL_SECONDS = 1.0  # RQ's rule: a second signal this soon is the same request (a pool sends two)


def _reachable(connection: Any) -> bool:
    try:
        return bool(connection.ping())
    except REDIS_ERRORS:
        return False


class Lane(Protocol):
    """What the lanes need of a lane's RQ worker (worker.main.GradingWorker)."""

    name: str
    connection: Any
    holding: str | None  # the job id it runs now

    def work(self, *, burst: bool = ..., with_scheduler: bool = ..., logging_level: str | None = ...) -> bool: ...

    def request_warm_stop(self) -> None: ...

    def register_death(self) -> None: ...


def lane_names(name: str | None, lanes: int) -> list[str]:
    """NAME for the first lane (so a one-lane worker is named as before), NAME-2, NAME-3, ... after."""
    base = name or uuid.uuid4().hex
    return [base] + [f"{base}-{i}" for i in range(2, lanes + 1)]


class Lanes:
    def __init__(self, workers: Sequence[Lane]) -> None:
        self.workers = list(workers)
        self._stop = threading.Event()
        self._stop_at = 0.0
        self.failed = False  # a lane ended on its own (not asked to stop, not a finished burst)

    def run(self, burst: bool = False) -> None:
        """Work until every lane has stopped (burst: until the queues are empty)."""
        threads = [threading.Thread(target=self._work, args=(worker, burst), name=f"lane-{i}")
                   for i, worker in enumerate(self.workers, 1)]
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for thread in threads:
                thread.start()
            forwarded = False
            while any(thread.is_alive() for thread in threads):
                if self._stop.wait(0.5) and not forwarded:
                    forwarded = True
                    for worker in self.workers:
                        worker.request_warm_stop()
                elif forwarded:
                    time.sleep(0.2)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _work(self, worker: Lane, burst: bool) -> None:
        ended_well = False
        try:
            while True:
                try:
                    worker.work(burst=burst, with_scheduler=False, logging_level="INFO")
                except REDIS_ERRORS:  # from RQ's own bookkeeping outside its retried dequeue
                    log.warning("lane %s lost Redis", worker.name)
                ended_well = burst or self._stop.is_set()
                if ended_well or not self._rejoin_after_outage(worker):
                    break
        finally:
            if not ended_well:
                self.failed = True
            if not ended_well and not self._stop.is_set():
                # A lane that quit on its own (an error in RQ, Redis gone for longer than an outage
                # is ridden out): stop the others after their jobs too, so the process ends and its
                # supervisor restarts it whole, instead of running on with fewer lanes than cores.
                log.error("lane %s stopped; stopping the worker's other lanes", worker.name)
                self._stop.set()

    def _rejoin_after_outage(self, worker: Lane) -> bool:
        """A lane whose RQ loop quit because Redis went away waits for Redis and works again
        (True); one that quit with Redis up, or that waited OUTAGE_SECONDS in vain, does not."""
        if _reachable(worker.connection):
            return False
        log.warning("lane %s: Redis is unreachable; waiting up to %d s for it", worker.name, OUTAGE_SECONDS)
        deadline = time.monotonic() + OUTAGE_SECONDS
        pause = 0.5
        while not _reachable(worker.connection):
            if self._stop.is_set() or time.monotonic() > deadline:
                return False
            self._stop.wait(pause)
            pause = min(2 * pause, 5.0)
        with contextlib.suppress(*REDIS_ERRORS):  # its registration may have outlived the outage
            worker.register_death()
        log.info("lane %s: Redis is back; working again", worker.name)
        return not self._stop.is_set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if not self._stop.is_set():
            log.info("%s: warm stop; each lane stops after the job it holds (again for a cold stop)",
                     signal.Signals(signum).name)
            self._stop_at = now
            self._stop.set()
        elif now - self._stop_at >= _REPEAT_SIGNAL_SECONDS:
            self._cold_stop()

    def _cold_stop(self) -> None:
        held = [w.name for w in self.workers if w.holding is not None]
        log.warning("cold stop: %d job(s) in flight (%s) are left for another worker to re-run",
                    len(held), ", ".join(held) or "none")
        for worker in self.workers:
            with contextlib.suppress(Exception):  # best effort: the records expire by themselves anyway
                worker.register_death()
        logging.shutdown()
        # No interpreter shutdown: the lanes would go on and write results of cases cut short.
        # The sandbox's children die with this process (parent-death signal, --die-with-parent).
        os._exit(1)

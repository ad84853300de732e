"""One worker, several jobs at once: lanes, each a process running one RQ worker.

The worker process starts one lane per job it runs at once (worker.lane: NAME, NAME-2, ...),
each an RQ worker of its own in the main thread of its own process, so each uses RQ as RQ is
meant to be used: its own work loop, signal handling and SIGALRM deadline, and its own Redis
registration and heartbeats, so that each job a killed worker held is found abandoned and
re-queued. (RQ's WorkerPool does the same for plain workers, but names its workers at random,
builds them with RQ's defaults, and starts RQ's scheduler in each; none of which suits here.)

This process runs no job. It forwards signals: a first SIGINT or SIGTERM asks every lane to stop
after the job it holds (warm stop, RQ's own); another one, a second or more later, is a cold
stop: the lanes are killed and deregistered, and the jobs they held are left to be re-queued by
another worker exactly as after a kill, rather than finished with cases cut short (which would
write a wrong result). A lane that ends on its own (an error, Redis gone for longer than an
outage is ridden out, a name already taken) stops the others too, and the process exits 1, so
its supervisor restarts the worker whole instead of running on with fewer lanes than cores."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from rq import Worker
from rq.serializers import JSONSerializer

from app.jobs import presence
from app.redis_link import REDIS_ERRORS, sync_connection

log = logging.getLogger(__name__)
_REPEAT_SIGNAL_SECONDS = 1.0  # RQ's rule: a second signal this soon is the same request
_POLL_SECONDS = 0.2


def lane_names(name: str | None, lanes: int) -> list[str]:
    """NAME for the first lane (so a one-lane worker is named as before), NAME-2, NAME-3, ... after."""
    base = name or uuid.uuid4().hex
    return [base] + [f"{base}-{i}" for i in range(2, lanes + 1)]


@dataclass
class LanePlan:
    name: str
    command: list[str]


def plan_lanes(names: Sequence[str], queues: Sequence[str], burst: bool) -> list[LanePlan]:
    plans = []
    for lane, name in enumerate(names, 1):
        command = [sys.executable, "-m", "worker.lane", "--name", name, "--queues", ",".join(queues),
                   "--lane", str(lane), "--lanes", str(len(names)), "--parent", str(os.getpid())]
        plans.append(LanePlan(name, command + (["--burst"] if burst else [])))
    return plans


class Lanes:
    def __init__(self, plans: Sequence[LanePlan], env: Mapping[str, str], redis_url: str, burst: bool = False) -> None:
        self.plans = list(plans)
        self.env = dict(env)
        self.redis_url = redis_url
        self.burst = burst
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = False
        self._stop_at = 0.0
        self._cold = False
        self.failed = False  # a lane ended on its own (not asked to stop, not a finished burst)

    def run(self) -> int:
        """Start the lanes and wait until every one has ended: 0 after a warm stop or a finished
        burst, 1 after a cold stop or when a lane ended on its own."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for plan in self.plans:
                self.processes[plan.name] = subprocess.Popen(plan.command, env=self.env)
            while self._running():
                time.sleep(_POLL_SECONDS)
            if self.failed:
                # a lane stopped while starting up may have registered and not deregistered; only
                # the lanes this process started are withdrawn (a name refused because another
                # worker holds it stays that worker's)
                deregister(self.redis_url, self._pids())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 1 if self.failed or self._cold else 0

    def _running(self) -> bool:
        ended = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        if ended and not self._stopping and not self.burst:
            log.error("lane(s) %s stopped (exit %s); stopping the worker's other lanes", ", ".join(ended),
                      ", ".join(str(code) for code in ended.values()))
            self.failed = True
            self._stop_lanes()
        if self.burst and any(code != 0 for code in ended.values()):
            self.failed = True
        return len(ended) < len(self.processes)

    def _stop_lanes(self) -> None:
        self._stopping = True
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if not self._stopping:
            log.info("%s: warm stop; each lane stops after the job it holds (again for a cold stop)",
                     signal.Signals(signum).name)
            self._stop_at = now
            self._stop_lanes()
        elif now - self._stop_at >= _REPEAT_SIGNAL_SECONDS and not self._cold:
            self._cold_stop()

    def _cold_stop(self) -> None:
        self._cold = True
        live = [name for name, p in self.processes.items() if p.poll() is None]
        log.warning("cold stop: lanes %s are killed; the jobs they held are left for another worker to re-run",
                    ", ".join(live) or "none")
        for name in live:
            with contextlib.suppress(ProcessLookupError):
                self.processes[name].kill()
        for process in self.processes.values():
            process.wait()
        deregister(self.redis_url, self._pids())

    def _pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}


def deregister(redis_url: str, lanes: Mapping[str, int]) -> None:
    """Best effort, as RQ's own cold stop does: the RQ registrations and presence records of the
    lanes named (lane name -> the pid this process started it as), each only if that process on
    this host made it (both would expire by themselves). Their jobs stay in RQ's started registry
    until their heartbeats lapse, and are then re-queued like any killed worker's."""
    connection = sync_connection(redis_url)
    host = socket.gethostname()
    try:
        for name, pid in lanes.items():
            with contextlib.suppress(*REDIS_ERRORS):
                worker = Worker.find_by_key(Worker.redis_worker_namespace_prefix + name, connection=connection,
                                            serializer=JSONSerializer)
                if worker is not None and (worker.pid, worker.hostname) == (pid, host):
                    worker.register_death()
                    presence.withdraw(connection, name)
    finally:
        connection.close()

"""``scaling-grader worker``: RQ workers for the judge and impl queues, several in one process.

The process runs QUEUE__WORKER_JOBS jobs at once (default: one per core it is given), each in a
lane (worker.lanes): an RQ SimpleWorker in a thread of its own. Jobs run in this process, which
keeps the sandbox's warm pool and fork server alive across jobs and shares them between lanes.
Each lane beats a heartbeat from a side thread while its job runs, with a TTL of seconds: if the
process is killed, another worker's maintenance (every few seconds) finds each of its jobs
abandoned and re-queues it. RQ's defaults would wait minutes."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from typing import Any

from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.utils import now
from rq.worker import WorkerStatus

from app.cpus import cores_given
from app.graders.impl import sandbox_status
from app.graders.kinds import queue_names
from app.jobs import keys, leases, presence, worker_health
from app.jobs.case_secret import restore_known_secret, with_deployment_secret
from app.jobs.leases import Lease, new_token
from app.jobs.worker_registry import record_sandbox_tier
from app.redis_link import REDIS_ERRORS, sync_connection
from app.sandbox import health as sandbox_health
from app.sandbox.pool import shutdown_all
from app.sandbox.stop import plain_tier_error, remove_stale_leftovers
from app.settings import Settings, get_settings
from worker.deadline import GradingDeadline, LaneDeadline
from worker.lanes import Lanes, lane_names

__all__ = ["GradingDeadline", "GradingWorker", "build_worker", "run"]

log = logging.getLogger(__name__)
QUEUES = queue_names()  # every queued kind's (app/graders/kinds.py)


class _QuietMaintenance(logging.Filter):
    """Maintenance runs every few seconds here (RQ's default is minutes); its per-queue INFO line
    would fill the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)  # RQ 3: "cleaning registries for queue", "cleaning group registries"
        return not ("cleaning" in message and "registries" in message)


class GradingWorker(SimpleWorker):
    """One lane: an RQ SimpleWorker run in a thread (worker.lanes), never in the main thread."""

    death_penalty_class = LaneDeadline  # per job, in the lane's thread; not SIGALRM (main thread only)
    heartbeat_grace = 3
    sandbox_tier = "none"  # judge-only workers run no sandbox
    holding: str | None = None  # the job id this lane runs now

    def _install_signal_handlers(self) -> None:
        """Signals are the main thread's (worker.lanes), which forwards them as stop requests; a
        thread cannot install handlers."""

    def request_warm_stop(self) -> None:
        """Stop after the job in hand, if any (called from the main thread)."""
        self._stop_requested = True
        self._shutdown_requested_date = now()
        self.handle_warm_shutdown_request()

    @property
    def should_run_maintenance_tasks(self) -> bool:
        # RQ asks this at the top of its work loop and of every pass of its dequeue loop, before it
        # blocks in BLPOP for at most dequeue_timeout (a few seconds): the one place an idle lane
        # can see a stop request, since the signal that RQ uses to interrupt BLPOP reaches only the
        # main thread. StopRequested is how RQ itself ends its loop on a stop.
        if self._stop_requested:
            raise StopRequested()
        if not super().should_run_maintenance_tasks:
            return False
        # Due here; but one lane of the whole deployment runs it per interval, not every lane:
        # RQ's maintenance lists every worker of each queue, so with one pass per lane the cost
        # would grow with the square of the lanes. A lane that is not the one waits an interval.
        if self.connection.set(keys.MAINTENANCE, self.name, nx=True, ex=self.maintenance_interval):
            restore_known_secret(self.connection)  # a Redis that lost its data gets the secret back
            return True
        self.last_cleaned_at = now()  # type: ignore[assignment]  # RQ annotates it as its initial None
        return False

    def register_birth(self) -> None:
        super().register_birth()
        record_sandbox_tier(self.connection, self.key, self.sandbox_tier)  # for the status page
        # Read (or store first) the deployment's case secret now, not at the first job: a worker
        # that holds it puts it back if Redis loses it (app.jobs.case_secret).
        with contextlib.suppress(*REDIS_ERRORS):
            with_deployment_secret(get_settings(), self.connection)

    presence: str | None = None  # JSON record published with every heartbeat (app.jobs.presence)
    presence_ttl = 10

    _last_beat = 0.0  # monotonic time of the last beat sent
    _last_presence = 0.0
    beat_lag_max = 0.0  # the beat thread's worst lateness so far, in seconds (published in presence)

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        # RQ beats at several points of one job (before the dequeue, as the job starts, after it,
        # and again before the next dequeue), each an HSET and two EXPIREs: beats closer together
        # than half the monitoring interval add nothing (the worker's key lives for a minute),
        # and on short jobs they were most of Redis's commands per job.
        clock = time.monotonic()
        if clock - self._last_beat >= self.job_monitoring_interval / 2:
            self._last_beat = clock
            super().heartbeat(timeout, pipeline)
        if self.presence is not None and clock - self._last_presence >= self.presence_ttl / 3:
            self._last_presence = clock
            record = presence.with_fields(self.presence, {"beat_lag_max": round(self.beat_lag_max, 3),
                                                          **worker_health.fields(sandbox_health.pid_usage())})
            presence.publish(pipeline if pipeline is not None else self.connection, self.name, record,
                             self.presence_ttl)

    def register_death(self) -> None:
        super().register_death()
        presence.withdraw(self.connection, self.name)

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        return int(self.job_monitoring_interval) + self.heartbeat_grace

    def execute_job(self, job: Job, queue: Queue) -> None:
        execution = self.prepare_execution(job)
        # The job function takes this lease (app.jobs.leases); the beat renews it with RQ's own
        # heartbeat, with the same TTL, so a lane that cannot beat loses both together.
        lease = Lease(self.connection, job.id, new_token(self.name), 1000 * self.get_heartbeat_ttl(job))
        stop = threading.Event()
        beat = threading.Thread(target=self._beat, args=(job, execution, lease, stop),
                                name=f"heartbeat-{self.name}", daemon=True)
        beat.start()
        self.holding = job.id
        leases.hold(lease)
        try:
            self.perform_job(job, queue, execution)
        finally:
            leases.hold(None)
            self.holding = None
            stop.set()
            beat.join()
        self.set_state(WorkerStatus.IDLE)

    def _beat(self, job: Job, execution: Any, lease: Lease, stop: threading.Event) -> None:
        # A thread of its own, which waits on nothing but its timer and Redis: a lane busy with its
        # cases, or a loaded machine, delays it by milliseconds (measured: docs/deployment.md),
        # far inside the grace. Only a stopped or cut-off process misses beats.
        due = time.monotonic() + self.job_monitoring_interval
        while not stop.wait(max(0.0, due - time.monotonic())):
            self.beat_lag_max = max(self.beat_lag_max, time.monotonic() - due)
            due += self.job_monitoring_interval
            try:
                self.maintain_heartbeats(job, execution)
                if not lease.lost and not lease.renew():  # logged once
                    log.warning("job %s: lease lost (this worker looked dead); its result is left to the "
                                "attempt that holds it now", job.id)
            except Exception:  # a missed beat only risks a re-run, whose result is not written twice
                log.warning("heartbeat for job %s failed", job.id, exc_info=True)


def build_worker(settings: Settings, queues: tuple[str, ...] = QUEUES, name: str | None = None) -> GradingWorker:
    """One lane, with a Redis connection of its own (an idle lane holds one in BLPOP)."""
    if not settings.redis_url:
        raise SystemExit("the worker needs SCALING_GRADER_REDIS_URL")
    connection = sync_connection(settings.redis_url)
    worker = GradingWorker(
        [Queue(q, connection=connection, serializer=JSONSerializer) for q in queues],
        connection=connection,
        serializer=JSONSerializer,
        name=name,
        job_monitoring_interval=max(1, math.ceil(settings.queue.heartbeat_interval)),
        maintenance_interval=settings.queue.maintenance_interval,
        # RQ blocks an idle worker in BLPOP for worker_ttl - 15 seconds and only then beats and
        # runs maintenance: a few seconds, not RQ's default 405, so an idle worker both shows as
        # live and re-queues a dead worker's job within seconds (and an idle lane sees a stop).
        worker_ttl=15 + settings.queue.maintenance_interval,
    )
    worker.heartbeat_grace = settings.queue.heartbeat_grace
    worker.presence_ttl = worker.dequeue_timeout + worker.job_monitoring_interval + settings.queue.heartbeat_grace
    return worker


def run(settings: Settings, queues: tuple[str, ...] = QUEUES, burst: bool = False, name: str | None = None) -> int:
    """Lanes (jobs at once): QUEUE__WORKER_JOBS, 0 meaning the cores this process is given."""
    if not logging.getLogger().handlers:  # RQ configures only its own logger, in work()
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("rq.worker").addFilter(_QuietMaintenance())
    if "impl" in queues:
        remove_stale_leftovers()
        refusal = plain_tier_error(settings, worker=True)
        if refusal:
            log.error("refusing to start: %s", refusal)
            return 2
    lanes = settings.queue.worker_lanes
    workers = [build_worker(settings, queues, lane) for lane in lane_names(name, lanes)]
    label = workers[0].name
    log.info("worker %s: %d lane(s) (jobs at once) on %d core(s) given; at most %d sandbox cases at once",
             label, lanes, cores_given(), settings.sandbox.max_concurrent_cases)
    sandbox = None
    if "impl" in queues:
        # Probe the isolation tiers and start the warm pool before taking the first job, and say
        # which tier and which case limits are in force.
        sandbox = sandbox_status(settings)
        log.info("worker %s: sandbox tier %s (minimum %s), case limits %s; probes: %s", label,
                 sandbox["tier"], sandbox["min_tier"], sandbox.get("limits"), sandbox["probes"])
        if not sandbox["meets_min_tier"]:
            log.error("worker %s: sandbox tier %s is below the required minimum %s: impl jobs will be "
                      "refused (sandbox_error), not run in a weaker sandbox", label, sandbox["tier"],
                      sandbox["min_tier"])
    for lane, worker in enumerate(workers, 1):
        if sandbox is not None:
            worker.sandbox_tier = sandbox.get("tier") or "unavailable"
        worker.presence = presence.record(worker.name, queues, sandbox, lane=lane, lanes=lanes)
    lane_set = Lanes(workers)
    try:
        lane_set.run(burst=burst)
    finally:  # warm stops come back here; a cold stop ends the process in worker.lanes
        shutdown_all()
    return 1 if lane_set.failed else 0

"""``scaling-grader worker``: an RQ worker for the judge and impl queues.

It runs jobs in its own process (RQ's SimpleWorker), which keeps the sandbox's warm pool alive
across jobs, and beats a heartbeat from a side thread while a job runs, with a TTL of seconds:
if this process is killed, another worker's maintenance (every few seconds) finds the job
abandoned and re-queues it. RQ's defaults would wait minutes."""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from rq import Queue, SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.timeouts import UnixSignalDeathPenalty
from rq.worker import WorkerStatus

from app.graders.impl import sandbox_status
from app.jobs import presence
from app.jobs.worker_registry import record_sandbox_tier
from app.redis_link import sync_connection
from app.sandbox.pool import shutdown_all
from app.sandbox.stop import plain_tier_error, remove_stale_leftovers
from app.settings import Settings

log = logging.getLogger(__name__)
QUEUES = ("impl", "judge")


class _QuietMaintenance(logging.Filter):
    """Maintenance runs every few seconds here (RQ's default is minutes); its per-queue INFO line
    would fill the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "cleaning registries" not in str(record.msg)


class GradingDeadline(BaseException):
    """A job ran past its backstop deadline. BaseException, so no broad handler inside the job
    can swallow it."""


class DeadlinePenalty(UnixSignalDeathPenalty):
    """RQ's SIGALRM deadline raising GradingDeadline; this is the only owner of SIGALRM in a worker."""

    def __init__(self, timeout: float, exception: Any = None, **kwargs: Any) -> None:
        super().__init__(timeout, GradingDeadline, **kwargs)


class GradingWorker(SimpleWorker):
    death_penalty_class = DeadlinePenalty
    heartbeat_grace = 3
    sandbox_tier = "none"  # judge-only workers run no sandbox

    def register_birth(self) -> None:
        super().register_birth()
        record_sandbox_tier(self.connection, self.key, self.sandbox_tier)  # for the status page

    presence: str | None = None  # JSON record published with every heartbeat (app.jobs.presence)
    presence_ttl = 10

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        super().heartbeat(timeout, pipeline)
        if self.presence is not None:
            presence.publish(pipeline if pipeline is not None else self.connection, self.name, self.presence,
                             self.presence_ttl)

    def register_death(self) -> None:
        super().register_death()
        presence.withdraw(self.connection, self.name)

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        return int(self.job_monitoring_interval) + self.heartbeat_grace

    def execute_job(self, job: Job, queue: Queue) -> None:
        execution = self.prepare_execution(job)
        stop = threading.Event()
        beat = threading.Thread(target=self._beat, args=(job, execution, stop), name="heartbeat", daemon=True)
        beat.start()
        try:
            self.perform_job(job, queue, execution)
        finally:
            stop.set()
            beat.join()
        self.set_state(WorkerStatus.IDLE)

    def _beat(self, job: Job, execution: Any, stop: threading.Event) -> None:
        while not stop.wait(self.job_monitoring_interval):
            try:
                self.maintain_heartbeats(job, execution)
            except Exception:  # a missed beat only risks a re-run, which is harmless
                log.warning("heartbeat for job %s failed", job.id, exc_info=True)


def build_worker(settings: Settings, queues: tuple[str, ...] = QUEUES, name: str | None = None) -> GradingWorker:
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
        # live and re-queues a dead worker's job within seconds.
        worker_ttl=15 + settings.queue.maintenance_interval,
    )
    worker.heartbeat_grace = settings.queue.heartbeat_grace
    worker.presence_ttl = worker.dequeue_timeout + worker.job_monitoring_interval + settings.queue.heartbeat_grace
    return worker


def run(settings: Settings, queues: tuple[str, ...] = QUEUES, burst: bool = False, name: str | None = None) -> int:
    if not logging.getLogger().handlers:  # RQ configures only its own logger, in work()
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("rq.worker").addFilter(_QuietMaintenance())
    if "impl" in queues:
        remove_stale_leftovers()
        refusal = plain_tier_error(settings, worker=True)
        if refusal:
            log.error("refusing to start: %s", refusal)
            return 2
    worker = build_worker(settings, queues, name)
    sandbox = None
    if "impl" in queues:
        # Probe the isolation tiers and start the warm pool before taking the first job, and say
        # which tier and which case limits are in force.
        sandbox = sandbox_status(settings)
        log.info("worker %s: sandbox tier %s (minimum %s), case limits %s; probes: %s", worker.name,
                 sandbox["tier"], sandbox["min_tier"], sandbox.get("limits"), sandbox["probes"])
        worker.sandbox_tier = sandbox.get("tier") or "unavailable"
        if not sandbox["meets_min_tier"]:
            log.error("worker %s: sandbox tier %s is below the required minimum %s: impl jobs will be "
                      "refused (sandbox_error), not run in a weaker sandbox", worker.name, sandbox["tier"],
                      sandbox["min_tier"])
    worker.presence = presence.record(worker.name, queues, sandbox)
    try:
        worker.work(burst=burst, with_scheduler=False, logging_level="INFO")
    finally:  # RQ's warm and cold shutdowns both come back here
        shutdown_all()
    return 0

"""The RQ worker of one lane: RQ's SimpleWorker, run as the main thread of a process of its own,
with RQ's per-job bookkeeping cut to what the service relies on (app.jobs.rq_bookkeeping).

Only RQ's public worker API is used (tests/jobs/test_rq_contract.py checks every piece of it):
the constructor's arguments, ``execute_job`` (the method RQ leaves to worker classes), the
documented ``death_penalty_class``, and the public hooks ``heartbeat``, ``get_heartbeat_ttl``,
``should_run_maintenance_tasks``, ``register_birth``, ``register_death`` and
``handle_warm_shutdown_request``.

What is added to SimpleWorker:

* Heartbeats while a job runs. SimpleWorker sends none (RQ's docs say so) and sets the job's
  heartbeat TTL to the whole job timeout, so a killed lane's job would wait many minutes to be
  re-run. Here a side thread beats every QUEUE__HEARTBEAT_INTERVAL, renewing only what a lapse
  would give away: the execution's entry in RQ's StartedJobRegistry (RQ's ``add_execution``),
  with a TTL of the interval plus QUEUE__HEARTBEAT_GRACE, which is also the job's lease
  (app.jobs.leases): a lane that is killed or cut off loses it within seconds, RQ's
  abandoned-job handling re-queues its job (at the front: app.jobs.redis_jobs enqueues with
  ``Retry(enqueue_at_front=True)``) and the next attempt takes the lease over. That is 1 Redis
  command a beat where RQ's ``maintain_heartbeats`` and a lease of its own took about 13
  (bench_redis_commands): RQ's other records of an execution are not written
  (app.jobs.rq_bookkeeping), the job's ``last_heartbeat`` is not rewritten (nothing reads it),
  and the worker's key is renewed only when it would otherwise expire before the next beat.
* One maintenance pass per interval for the whole deployment (RQ's runs on every worker, and its
  cost grows with the number of workers each pass lists), and of it only the look for abandoned
  jobs every interval, the look for jobs taken and never started once a minute, RQ's whole pass
  every five minutes.
* Fewer of RQ's worker beats (only those the worker's key needs), and the lane's presence record
  (app.jobs.presence) on the same beat."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from typing import Any

from rq import Queue, worker_registration
from rq.job import Job
from rq.registry import RateLimitRegistry
from rq.serializers import JSONSerializer
from rq.utils import now
from rq.worker import WorkerStatus

from app.graders.kinds import queue_names
from app.jobs import keys, leases, presence, worker_health
from app.jobs.case_secret import restore_known_secret, with_deployment_secret
from app.jobs.leases import Lease
from app.jobs.rq_bookkeeping import JOBS_DONE_FIELD, LeanBookkeeping
from app.jobs.worker_registry import record_sandbox_tier
from app.redis_link import REDIS_ERRORS, sync_connection
from app.sandbox import health as sandbox_health
from app.settings import Settings, get_settings
from worker.deadline import JobDeadline
from worker.dequeue import LaneQueue, requeue_stranded

log = logging.getLogger(__name__)
QUEUES = queue_names()  # every queued kind's (app/graders/kinds.py)
_BEAT_MARGIN_SECONDS = 10.0
_NO_DEADLINE_LEASE_SECONDS = 24 * 3600  # a job without a deadline (RQ's -1): its lease's key lives a day
MINUTE_MAINTENANCE_SECONDS = 60  # the look for stranded jobs (run_maintenance_tasks)
REGISTRY_MAINTENANCE_SECONDS = 300  # RQ's whole pass of its registries
# An idle lane's wait for a job (BLMOVE: worker.dequeue) at most: its chance to beat, send its presence record, run
# maintenance when due, and see a stop request.
IDLE_DEQUEUE_SECONDS = 5
CLOCK_SYNC_SECONDS = 300  # how often a lane measures Redis's clock against its host's (one TIME)
CLOCK_SYNC_MAX_ROUND_TRIP = 0.2  # a reading whose round trip took longer is not trusted over an earlier one
CLOCK_RETRY_SECONDS = 60  # when the next reading is taken after one of those


class GradingWorker(LeanBookkeeping):
    death_penalty_class = JobDeadline  # RQ's SIGALRM penalty (the job runs in the main thread)
    heartbeat_grace = 3
    sandbox_tier = "none"  # judge-only workers run no sandbox
    presence: str | None = None  # JSON record published with the beats (app.jobs.presence)
    presence_ttl = 10
    holding: str | None = None  # the job id this lane runs now
    stop_asked = False  # a first SIGINT or SIGTERM came (RQ's warm stop)
    beat_lag_max = 0.0  # the beat thread's worst lateness so far, in seconds (published in presence)
    _key_lives_until = 0.0  # monotonic time at which the worker's key expires, as of the last beat sent
    _last_presence = 0.0
    _listed_at = float("-inf")  # monotonic time this lane last put its name on the list of workers
    _minute_pass_asked_at = float("-inf")  # monotonic time this lane last asked for the minute's maintenance pass
    _clock_synced_at = float("-inf")  # monotonic time this lane last measured Redis's clock (_sync_clock)

    @property
    def should_run_maintenance_tasks(self) -> bool:
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

    def run_maintenance_tasks(self) -> None:
        # Every interval, only what must be prompt: the queues' abandoned jobs (RQ's own
        # StartedJobRegistry.cleanup, after one command a queue that finds whether there are
        # any), so that a dead lane's job is re-queued within seconds. Once per
        # MINUTE_MAINTENANCE_SECONDS, the look for jobs a lane took and never started (it died, or
        # lost the answer to a network cut: worker.dequeue), an LLEN a queue: such a job goes back
        # at the second look that finds it, within one or two minutes. RQ's whole pass (the
        # finished, failed, deferred, ready and rate-limit registries, the worker registry, the
        # groups; that look with it) once per REGISTRY_MAINTENANCE_SECONDS, in the minute's turn:
        # about 20 commands for two queues and more for every registered worker, none of it
        # urgent (the service keeps no finished jobs, defers none and fails few; a dead worker's
        # records expire by themselves). Once a minute it was a third of a busy stack's upkeep.
        self._requeue_abandoned()
        # whose turn the minute's pass is: asked of Redis at most once a period by each lane
        clock = time.monotonic()
        if clock - self._minute_pass_asked_at >= MINUTE_MAINTENANCE_SECONDS:
            self._minute_pass_asked_at = clock
            if self.connection.set(keys.MINUTE_MAINTENANCE, self.name, nx=True, ex=MINUTE_MAINTENANCE_SECONDS):
                if self.connection.set(keys.REGISTRY_MAINTENANCE, self.name, nx=True,
                                       ex=REGISTRY_MAINTENANCE_SECONDS):
                    super().run_maintenance_tasks()  # (its registries' cleanup, and that look: clean_registries)
                else:
                    self._requeue_stranded()
        self.last_cleaned_at = now()  # type: ignore[assignment]  # RQ annotates it as its initial None

    def _requeue_stranded(self) -> None:
        """The look for jobs stranded in the queues' intermediate lists (worker.dequeue), logged."""
        for queue in self.queues:
            requeued = requeue_stranded(queue)
            if requeued:
                log.warning("%d job(s) taken by a lane that died before starting them went back to the front "
                            "of queue %s", requeued, queue.name)

    def clean_registries(self) -> None:
        # RQ's own (BaseWorker.clean_registries, and rq.registry.clean_registries for each queue),
        # with two changes: a job left in a queue's intermediate list goes back to the front of
        # its queue as it was (worker.dequeue), not through RQ's failure path; and
        # the StartedJobRegistry is cleaned in Redis's time, as its entries are
        # scored (app.jobs.rq_bookkeeping), not by this host's clock, which may be off Redis's: a
        # lane whose clock leads would take live lanes' jobs for abandoned, and one skipping the
        # pass instead left it undone wherever every host's clock was off Redis's.
        # (tests/jobs/test_rq_contract.py checks that RQ's cleans no registry this does not.)
        for queue in self.queues:
            if queue.acquire_maintenance_lock():
                self.log.info("Worker %s: cleaning registries for queue: %s", self.name, queue.name)
                queue.finished_job_registry.cleanup()
                queue.started_job_registry.cleanup(self._registry_now(), exception_handlers=self._exc_handlers)
                queue.failed_job_registry.cleanup()
                queue.deferred_job_registry.cleanup()
                queue.ready_job_registry.cleanup()
                for rate_limit_registry in RateLimitRegistry.all(queue.connection):
                    rate_limit_registry.cleanup()
                worker_registration.clean_worker_registry(queue)
                queue.release_maintenance_lock()
        # in place of RQ's intermediate_queue.cleanup (worker.dequeue), and whether or not RQ's lock
        # of a queue was had (a lane that died or lost Redis in its pass holds it 899 s): the look
        # for stranded jobs is one script, safe beside another look
        self._requeue_stranded()
        self.last_cleaned_at = now()  # type: ignore[assignment]  # RQ annotates it as its initial None

    def _requeue_abandoned(self) -> None:
        """RQ's abandoned-job handling (StartedJobRegistry.cleanup) for the queues that hold an
        expired execution: one look per queue, RQ's cleanup only where something expired."""
        cutoff = self._registry_now()  # Redis's time, as the entries' scores (app.jobs.rq_bookkeeping)
        for queue in self.queues:
            registry = queue.started_job_registry
            if self.connection.zrangebyscore(registry.key, 0, cutoff, start=0, num=1):
                registry.cleanup(cutoff)

    def register_birth(self) -> None:
        # A live lane's record always has a TTL (every beat sets one). One without is what a lane
        # killed after a Redis flush can leave (its job's end rewrote a few fields of a record the
        # flush had removed): RQ would refuse this name for good, so it is cleared, and only it.
        if self.connection.ttl(self.key) == -1:
            log.warning("%s: clearing a record of this name left without a TTL", self.name)
            self.connection.delete(self.key)
        super().register_birth()
        self._key_lives_until = 0.0  # (again after an outage) the next beat goes out
        self._sync_clock()
        record_sandbox_tier(self.connection, self.key, self.sandbox_tier)  # for the status page
        # Read (or store first) the deployment's case secret now, not at the first job: a worker
        # that holds it puts it back if Redis loses it (app.jobs.case_secret).
        with contextlib.suppress(*REDIS_ERRORS):
            with_deployment_secret(get_settings(), self.connection)

    def _sync_clock(self) -> None:
        """Measure Redis's clock against this host's (one TIME): the StartedJobRegistry's scores are
        written and compared in Redis's time, so a lane whose host clock is off neither looks dead
        to the others nor takes their live jobs for abandoned (app.jobs.rq_bookkeeping). Again
        every CLOCK_SYNC_SECONDS, for a clock that drifts or is stepped."""
        sent = time.monotonic()
        seconds, micros = self.connection.time()
        received = time.monotonic()
        # A late answer (Redis busy, the network) may be off by half the round trip: it does not
        # replace a reading already held (a first one is used: better than the host's clock),
        # and another is taken a minute on rather than at the period's end.
        late = received - sent > CLOCK_SYNC_MAX_ROUND_TRIP
        if not late or self._registry_base is None:
            self._registry_base = seconds + micros / 1_000_000 - (sent + received) / 2
        self._clock_synced_at = received - (CLOCK_SYNC_SECONDS - CLOCK_RETRY_SECONDS if late else 0)
        if not self._clock_agrees():
            log.warning("%s: this host's clock is %.1f s off Redis's (the lanes' scores use Redis's clock; RQ's "
                        "own tools, which use the host's, misjudge them)", self.name, -self._clock_offset())

    def _clock_offset(self) -> float:
        """Redis's clock less this host's wall clock, now (as of the last measurement of Redis's)."""
        return self._registry_now() - time.time()

    def _clock_agrees(self) -> bool:
        """This host's wall clock is within half the grace of Redis's now (else logged, and shown
        in the presence record: RQ's own tools, which use the host's clock, misjudge its lanes)."""
        return abs(self._clock_offset()) <= self.heartbeat_grace / 2

    def register_death(self) -> None:
        # RQ's teardown calls this before it leaves the command channel. A Redis error raised
        # here replaced the StopRequested that ended the loop (a lane asked to stop during an
        # outage went on to wait for Redis, and then worked again) and skipped the unsubscribe
        # (each outage left a command thread subscribed: a command was then handled twice). The
        # registration and the presence record expire by themselves.
        try:
            super().register_death()
            presence.withdraw(self.connection, self.name)
        except REDIS_ERRORS as error:
            log.warning("%s: could not deregister (Redis: %s); the records expire by themselves", self.name, error)

    def handle_warm_shutdown_request(self) -> None:
        # RQ's hook in its first-signal handler: whether RQ's loop ended because a stop was asked
        # is otherwise known only inside RQ (worker.lane does not wait out an outage then)
        self.stop_asked = True
        super().handle_warm_shutdown_request()

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        # RQ beats at several points of one job (before the dequeue, as the job starts, after it,
        # and again before the next dequeue), each an HSET and two EXPIREs, most with a TTL of a
        # minute or more: a beat is sent only when the worker's key would otherwise expire before
        # RQ's next chance to beat (an idle worker's dequeue timeout, plus a margin). Skipping a
        # beat never shortens the key's life: RQ's beats set the TTL, they do not add to it.
        if self._worker_beat_due(self.dequeue_timeout):
            self._beat_worker_key(timeout, pipeline)
        self._send_jobs_done(only_if_due=True)  # (RQ beats from the lane's main thread: between jobs)
        if time.monotonic() - self._clock_synced_at >= CLOCK_SYNC_SECONDS:
            self._sync_clock()
        # not on RQ's pipeline (only its suspension check passes one): the reply says whether the
        # record was missing, and RQ executes its pipeline where this lane does not see it
        self._publish_presence()

    def _beat_worker_key(self, timeout: int | None, pipeline: Any) -> None:
        super().heartbeat(timeout, pipeline)
        self._key_lives_until = time.monotonic() + (timeout or self.worker_ttl + 60)

    def _worker_beat_due(self, until_next_chance: float) -> bool:
        """Whether the worker's key would expire before the next chance to beat, plus a margin
        (RQ's main loop beats again before each dequeue; the beat thread at its next beat)."""
        return self._key_lives_until - time.monotonic() < until_next_chance + _BEAT_MARGIN_SECONDS

    def _publish_presence(self, pipeline: Any = None) -> bool:
        """The lane's presence record, when due (queued on ``pipeline`` if given: then the caller
        hands its reply to ``_presence_sent``). True when one was sent or queued."""
        clock = time.monotonic()
        # due once the record would lapse within two of the lane's chances to publish (a busy
        # lane's beat, an idle one's dequeue timeout): one chance may be missed, and no record is
        # sent sooner (with the default 30 s TTL: every 20 s; every 6.7 s with a 20 s TTL until
        # 2026-12-04)
        if self.presence is None or self.presence_ttl - (clock - self._last_presence) > 2 * self._presence_chance:
            return False
        self._last_presence = clock
        record = presence.with_fields(self.presence, {"beat_lag_max": round(self.beat_lag_max, 3),
                                                      "clock_offset": round(self._clock_offset(), 3),
                                                      **worker_health.fields(sandbox_health.pid_usage())})
        replaced = presence.publish(pipeline if pipeline is not None else self.connection, self.name, record,
                                    self.presence_ttl)
        if pipeline is None:
            self._presence_sent(replaced)
        return True

    @property
    def _presence_chance(self) -> float:
        """The longest a lane goes between chances to send its presence record: a busy lane's
        beat interval, an idle one's dequeue timeout."""
        return max(self.dequeue_timeout, self.job_monitoring_interval)

    def _presence_sent(self, replaced: Any) -> None:
        """The name goes (back) on the list of workers when its record was missing, and every
        presence.LIST_EVERY_SECONDS (the list forgets names silent for an hour)."""
        clock = time.monotonic()
        if replaced is None or clock - self._listed_at >= presence.LIST_EVERY_SECONDS:
            presence.list_name(self.connection, self.name)
            self._listed_at = clock

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        return int(self.job_monitoring_interval) + self.heartbeat_grace

    def execute_job(self, job: Job, queue: Queue) -> None:
        """SimpleWorker's, with the beat thread beside the job."""
        execution = self.prepare_execution(job)
        # The job function takes this lease (app.jobs.leases). Its token is the execution's entry
        # in the StartedJobRegistry, which the beat keeps alive: the lease is held while the entry
        # is, and needs no renewal; its key outlives the job's deadline and then lapses.
        lease = self._job_lease(job, execution)
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

    def _job_lease(self, job: Job, execution: Any) -> Lease:
        """The lease of this lane's attempt of ``job``: held while ``execution``'s entry in the
        StartedJobRegistry is alive, its key kept past the job's deadline (RQ's death penalty ends
        the job by then) and the last beat's entry."""
        deadline = job.timeout if job.timeout and job.timeout > 0 else _NO_DEADLINE_LEASE_SECONDS
        return Lease(self.connection, job.id, execution.composite_key,
                     1000 * (int(deadline) + self.get_heartbeat_ttl(job)), registry=job.started_job_registry.key)

    def _beat(self, job: Job, execution: Any, lease: Lease, stop: threading.Event) -> None:
        # A thread of its own, which waits on nothing but its timer and Redis: a lane busy with its
        # cases, or a loaded machine, delays it by milliseconds (measured: docs/deployment.md),
        # far inside the grace. Only a stopped or cut-off process misses beats.
        due = time.monotonic() + self.job_monitoring_interval
        while not stop.wait(max(0.0, due - time.monotonic())):
            self.beat_lag_max = max(self.beat_lag_max, time.monotonic() - due)
            due += self.job_monitoring_interval
            try:
                self._beat_once(job, execution, lease)
            except Exception:  # a missed beat only risks a re-run, whose result is not written twice
                log.warning("heartbeat for job %s failed", job.id, exc_info=True)

    def _beat_once(self, job: Job, execution: Any, lease: Lease) -> None:
        """One beat of a running job, in one round trip: the execution's entry in RQ's
        StartedJobRegistry, which is also the job's lease (app.jobs.leases), only if RQ has not
        removed it (XX); when due, the worker's key, the worker's count of jobs done (jobs done
        before a long job: app.jobs.rq_bookkeeping) and the lane's presence."""
        worker_beat = self._worker_beat_due(self.job_monitoring_interval)
        worker_ttl = self.job_monitoring_interval + 60  # as RQ's maintain_heartbeats gives the worker's key
        # (the main thread counts a job done while this thread lives, and writes the count only
        # once it has joined it: the two never write it at once, and a total written late is not
        # lower than one written before it)
        jobs_done = self.successful_job_count if self._jobs_done_due() else None
        with self.connection.pipeline(transaction=False) as pipeline:
            # XX: not put back once RQ removed it; CH: the reply says whether it was still there
            # (its score, a float, changes with every beat; RQ's cleanup reads it as its own)
            self._add_execution(job, execution, pipeline, xx=True, ch=True)
            if worker_beat:
                self._beat_worker_key(worker_ttl, pipeline)
            if jobs_done is not None:
                pipeline.hset(self.key, JOBS_DONE_FIELD, jobs_done)
            published = self._publish_presence(pipeline)
            replies = pipeline.execute()
        if jobs_done is not None:
            self._jobs_done_sent = jobs_done
        if published:
            self._presence_sent(replies[-1])
        if replies[0] != 1 and lease.taken and not lease.lost:  # logged once
            lease.lost = True
            log.warning("job %s: lease lost (this worker looked dead); its result is left to the attempt that "
                        "holds it now", job.id)
            # RQ re-queued the job (a stall past the entry's TTL) or Redis lost the entry (a flush, a
            # restart without persistence): the worker's key may be gone too, so the next beat (or
            # RQ's, after the job) checks it and puts the record back, before the job's end writes
            # to it without a TTL
            self._key_lives_until = 0.0
        if worker_beat and replies[1] == 1:
            # the worker's key had expired (a stall past its TTL, or Redis lost it): the HSET made
            # a hash with one field, so the whole record goes back, with its TTL (as RQ does)
            with self.connection.pipeline(transaction=False) as pipeline:
                pipeline.hset(self.key, mapping={**self.serialize(), JOBS_DONE_FIELD: self._jobs_done_sent})
                pipeline.expire(self.key, worker_ttl)
                pipeline.execute()


def build_worker(settings: Settings, queues: tuple[str, ...] = QUEUES, name: str | None = None) -> GradingWorker:
    """One lane's worker, with a Redis connection of its own."""
    if not settings.redis_url:
        raise SystemExit("the worker needs SCALING_GRADER_REDIS_URL")
    connection = sync_connection(settings.redis_url)
    queue_class = LaneQueue.of_one_lane()  # its dequeue never leaves a job in no list (worker.dequeue)
    worker = GradingWorker(
        [queue_class(q, connection=connection, serializer=JSONSerializer) for q in queues],
        connection=connection,
        serializer=JSONSerializer,
        queue_class=queue_class,
        name=name,
        job_monitoring_interval=max(1, math.ceil(settings.queue.heartbeat_interval)),
        maintenance_interval=settings.queue.maintenance_interval,
        # RQ blocks an idle worker for worker_ttl - 15 seconds and only then beats and
        # runs maintenance: a few seconds, not RQ's default 405, so an idle worker both shows as
        # live and re-queues a dead worker's job within seconds. Not longer than the maintenance
        # interval (it is the lane's chance to run maintenance), and not tied to it above
        # IDLE_DEQUEUE_SECONDS (an idle lane's presence record, and its stop, wait for it).
        worker_ttl=15 + min(settings.queue.maintenance_interval, IDLE_DEQUEUE_SECONDS),
    )
    worker.heartbeat_grace = settings.queue.heartbeat_grace
    queue_class.before_wait = worker._send_jobs_done  # its count of jobs done, sent as it goes idle
    # A lane drops out of the listing (the status page, /readyz's live workers) this long after its
    # last record: the grace past a missed chance to send one, and two chances more, so that the
    # record is sent once every 20 s by default (_publish_presence), not every 10 s
    worker.presence_ttl = (worker.dequeue_timeout + worker.job_monitoring_interval + settings.queue.heartbeat_grace
                           + 2 * worker._presence_chance)
    return worker

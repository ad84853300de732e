"""RQ's per-job bookkeeping, without what the service's own records already hold.

An RQ ``SimpleWorker`` spends about 45 Redis commands on each job it runs (measured with
MONITOR: bench/bench_redis_commands.py): the execution's records, the job's start, and on
success a transaction that watches the job's dependents, stores its return value in a results
stream, adds it to the finished registry and sets TTLs on the job, its dependents and its
dependencies. The service stores every result itself, once, under its own key (app.jobs.leases),
and its jobs have no dependents, dependencies, repeats, callbacks or rate limits. This worker
class keeps what the service relies on RQ for and drops the rest. It overrides these public
``BaseWorker`` methods (each checked by tests/jobs/test_rq_contract.py):

* ``prepare_execution``: the execution's entry in the queue's ``StartedJobRegistry`` (the record
  RQ's abandoned-job handling reads; its TTL is the heartbeat's, renewed by every beat:
  worker.grading_worker; written as RQ's ``add_execution`` writes it, with the score in Redis's
  time as the lane measured it, not the host's) and the job's ``started`` record (status, started_at, worker_name,
  last_heartbeat: ``Job.prepare_for_execution``), as RQ writes them, and the id's removal from
  RQ's intermediate list of its queue, where every lane's dequeue puts it (worker.dequeue; RQ
  removes it in ``prepare_job_execution``, for a worker of one queue only), in one pipeline
  without MULTI/EXEC: 3 commands. Not the worker's ``busy`` state, nor its ``idle`` state after the job
  (an HSET each; kept in memory: ``set_state``): the StartedJobRegistry says which worker is
  busy, and the status page and metrics read it there (app.jobs.worker_registry); RQ's own tools
  show a lane as idle. Nor RQ's other records of an execution (``Execution.create``: its hash,
  the job's and the worker's indexes of it, each with a TTL, 7 commands more, and 3 more to
  delete): RQ's monitoring reads them (``rq info``'s job of a worker), nothing RQ runs does. The
  status page finds a worker's job the other way round, in the StartedJobRegistry and the job's
  ``worker_name``.
* ``prepare_job_execution``: RQ writes the job's ``started`` record here, a round trip later, in a
  transaction with a separate job beat writing the same ``last_heartbeat`` again, a worker beat
  (sent only when the worker's key needs one: worker.grading_worker) and a PERSIST of a job key
  that has no TTL (the service enqueues without ``ttl``), and the removal from the intermediate
  list. Here: nothing, unless the job was enqueued with a ``ttl`` (PERSIST). With
  prepare_execution, 5 commands fewer, and no moment at which the job
  is in the StartedJobRegistry but not ``started`` (which RQ's abandoned-job handling would skip,
  leaving a popped job that never runs).
* ``handle_execution_ended``: records the end time without RQ's extra job beat (1 command), which
  keeps the job's heartbeat fresh while success or failure callbacks run; there are none.
* ``handle_job_success``: what RQ does with ``result_ttl=0`` (the job's records deleted once it
  succeeded: the service's result key holds the result) in one pipeline: a DEL of the job hash
  and the entry in the StartedJobRegistry (2 commands, against about 20 for RQ's path). Not RQ's
  total working time, which nothing reads. The worker's count of jobs done (RQ's
  ``successful_job_count``, which the status page shows: the lane's jobs since its registration)
  is kept in memory and written for several jobs at once, as a total (an HSET, which a retry
  after a lost reply cannot count twice, where an HINCRBY of the run would): as the lane, its
  queues empty, goes to wait for work (worker.dequeue), as it stops, and once the oldest job not
  yet in it is JOBS_DONE_EVERY_SECONDS old (between jobs, or with a running job's heartbeat:
  worker.grading_worker): for a lane that is never idle, one command a minute where it was one a
  job. A lane killed outright, or stopped while Redis is away, takes the part not yet written
  with it (the count only informs: grades are counted with their results, app.jobs.leases). A
  job that uses anything this skips (repeats, success callbacks, a rate limit, a result TTL other
  than 0) takes RQ's own path.
* ``set_state``: ``busy`` and ``idle`` around each job are kept in memory only (RQ's warm stop
  reads them; the StartedJobRegistry tells others which worker is busy); other states (its start,
  ``suspended``) are written as RQ writes them, an unchanged one not again outside a pipeline.
* ``check_for_suspension``: ``rq suspend`` is checked at most once every 15 s between jobs (and
  before every job in burst mode), not before every job, and with one EXISTS of RQ's suspension
  key (RQ's check is a transaction of 3 commands and a worker beat); RQ's own handling (the
  ``suspended`` state, the wait, burst mode's exit) runs once it is set. A suspension takes
  effect within 15 s (it was 5, at one EXISTS a lane every 5 s between jobs), after the job in
  hand, as before.
* ``unsubscribe``: RQ's command channel left in an order that cannot stall the worker's stop for
  a minute (app.jobs.command_channel).

What RQ guarantees and the service relies on is unchanged: a job is pushed and popped by RQ; its
execution is in the StartedJobRegistry with status ``started`` while it runs, its entry renewed
by the lane's heartbeat with RQ's ``add_execution``; a worker that dies leaves the entry to
expire, and RQ's maintenance re-queues the job (``Retry``, at the front) or fails it; a job that
raises takes RQ's failure path unchanged (failed registry, ``failed`` status the API reads).
"""

from __future__ import annotations

import time
from typing import Any, cast
from uuid import uuid4

from rq import SimpleWorker
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.suspension import WORKERS_SUSPENDED
from rq.utils import now
from rq.worker import WorkerStatus

from app.jobs.command_channel import PromptUnsubscribe

SUSPENSION_CHECK_SECONDS = 15.0  # an operator's pause, not a safety stop: a lane finishes its job first anyway
# How long a job done may wait to be in RQ's record of the worker's count (sent between jobs, or
# with the next heartbeat of a running job: within a heartbeat interval more)
JOBS_DONE_EVERY_SECONDS = 60.0
JOBS_DONE_FIELD = "successful_job_count"  # RQ's field of the worker's hash


class _Unsent:
    """A pipeline that sends nothing: RQ's set_state then keeps the state in memory alone."""

    def hset(self, *args: Any, **kwargs: Any) -> None:
        return None


_UNSENT = _Unsent()
_JOB_STATES = (WorkerStatus.BUSY, WorkerStatus.IDLE)


def lean_success_applies(job: Job) -> bool:
    """True for a job whose success needs nothing RQ's own path does beyond what
    ``LeanBookkeeping.handle_job_success`` writes (the service's jobs: no repeats, no callbacks,
    no rate limit, results kept by the service: ``result_ttl=0``)."""
    return (job.result_ttl == 0 and not job.repeats_left and job.success_callback is None
            and not job.has_rate_limit)


class LeanBookkeeping(PromptUnsubscribe, SimpleWorker):
    """A SimpleWorker that writes only the bookkeeping RQ's guarantees need (module docstring)."""

    _suspension_checked_at = float("-inf")
    # Redis's clock less this process's monotonic clock (seconds), as last measured; None until a
    # subclass measures it (worker.grading_worker), and then the host's wall clock is used. The
    # StartedJobRegistry's scores are written and compared in Redis's time, so that lanes on hosts
    # whose clocks disagree read each other's entries alike; counted from the monotonic clock, so
    # that a host clock stepped between two measurements does not move them.
    _registry_base: float | None = None
    # the count of jobs done as last written to Redis (RQ's successful_job_count, held in memory,
    # is the lane's total since its registration: _send_jobs_done)
    _jobs_done_sent = 0
    _jobs_done_since = 0.0  # monotonic time the oldest job done not in it was done

    def _registry_now(self) -> float:
        """Now, in Redis's time as last measured: the clock of the StartedJobRegistry's scores."""
        if self._registry_base is None:
            return time.time()
        return time.monotonic() + self._registry_base

    def _add_execution(self, job: Job, execution: Execution, pipeline: Any, **flags: bool) -> None:
        """RQ's ``StartedJobRegistry.add_execution`` (the execution's entry, scored now + the
        heartbeat's TTL) in Redis's time (_registry_now), on ``pipeline``; ``flags``: ZADD's (a
        beat's ``xx`` and ``ch``)."""
        pipeline.zadd(job.started_job_registry.key,
                      {execution.composite_key: self._registry_now() + self.get_heartbeat_ttl(job)}, **flags)

    def prepare_execution(self, job: Job) -> Execution:
        execution = Execution(id=uuid4().hex, job_id=job.id, connection=self.connection, worker_name=self.name)
        with self.connection.pipeline(transaction=False) as pipeline:
            self._add_execution(job, execution, pipeline)
            self.executions[execution.id] = execution
            self.set_state(WorkerStatus.BUSY, pipeline=pipeline)  # in memory (set_state)
            # the job's started record in the same round trip as its StartedJobRegistry entry
            # (RQ writes it a round trip later, in prepare_job_execution): a worker killed in
            # between would leave a job RQ's abandoned-job handling skips (it re-queues only
            # ``started`` jobs), popped from its queue and never run
            job.prepare_for_execution(self.name, pipeline=pipeline)
            # and the id off the intermediate list its dequeue moved it to (every lane's dequeue
            # does: worker.dequeue), in the same round trip: from here the registry holds it
            pipeline.lrem(Queue(job.origin, connection=self.connection).intermediate_queue_key, 1, job.id)
            pipeline.execute()
        return execution

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        # the started record, and the id's removal from the intermediate list (RQ's for a worker
        # of one queue), went out with the execution's (prepare_execution); what is left of RQ's,
        # where it applies: a job enqueued with a ttl loses it while it runs
        if job.ttl is not None:
            self.connection.persist(job.key)
        self.procline(f"Processing {job.func_name} from {job.origin} since {time.time()}")

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        job.ended_at = now()

    def handle_job_success(self, job: Job, queue: Queue, started_job_registry: Any, execution: Execution) -> None:
        if not self._jobs_done_unsent():
            self._jobs_done_since = time.monotonic()
        self.successful_job_count += 1  # (RQ's own path also adds it to Redis: the total written later agrees)
        if not lean_success_applies(job):
            super().handle_job_success(job, queue, started_job_registry, execution)
            return
        assert job.started_at is not None and job.ended_at is not None
        with self.connection.pipeline(transaction=False) as pipeline:
            pipeline.delete(job.key)
            started_job_registry.remove_execution(execution, pipeline=pipeline)
            self.set_state(WorkerStatus.IDLE, pipeline=pipeline)  # in memory (set_state)
            pipeline.execute()
        self.executions.pop(execution.id, None)
        self.log.info("Successfully completed job %s in %ss on worker %s", job.id, job.ended_at - job.started_at,
                      self.name)

    def _jobs_done_unsent(self) -> bool:
        return self.successful_job_count != self._jobs_done_sent

    def _jobs_done_due(self) -> bool:
        """Jobs done are not yet in RQ's record, the oldest for JOBS_DONE_EVERY_SECONDS."""
        return self._jobs_done_unsent() and time.monotonic() - self._jobs_done_since >= JOBS_DONE_EVERY_SECONDS

    def _send_jobs_done(self, only_if_due: bool = False) -> None:
        """RQ's count of this worker's jobs done, written as the total (one HSET) when jobs done are
        not in it yet; with ``only_if_due``, only once the oldest of them is due (_jobs_done_due).
        From the lane's main thread, between jobs (a running job's heartbeat sends it otherwise)."""
        if not (self._jobs_done_due() if only_if_due else self._jobs_done_unsent()):
            return
        total = self.successful_job_count
        self.connection.hset(self.key, JOBS_DONE_FIELD, total)
        self._jobs_done_sent = total

    def register_birth(self) -> None:
        super().register_birth()  # (a new record: the lane's count goes in again, whole)
        self._jobs_done_sent, self._jobs_done_since = 0, time.monotonic()

    def register_death(self) -> None:
        self._send_jobs_done()  # RQ keeps a stopped worker's record for a minute: its count whole
        super().register_death()

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if state in _JOB_STATES and self.get_state() in _JOB_STATES:
            # busy <-> idle around a job: kept in memory (RQ's warm stop reads it: a stop asked
            # of a busy worker waits for its job), not written (the StartedJobRegistry says it)
            super().set_state(state, cast("Any", _UNSENT))
            return
        if pipeline is None and state == self.get_state():
            return
        super().set_state(state, pipeline)

    def check_for_suspension(self, burst: bool) -> None:
        clock = time.monotonic()
        if not burst and clock - self._suspension_checked_at < SUSPENSION_CHECK_SECONDS:
            return
        self._suspension_checked_at = clock
        if self.connection.exists(WORKERS_SUSPENDED):
            super().check_for_suspension(burst)

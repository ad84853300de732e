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
  succeeded: the service's result key holds the result), plus the worker's count of jobs done
  (the status page shows it; not RQ's total working time, which nothing reads), in one
  pipeline: the worker's count, a DEL of the job hash and the entry in the StartedJobRegistry (3
  commands, against about 20 for RQ's path). A job that uses
  anything this skips (repeats, success callbacks, a rate limit, a result TTL other than 0)
  takes RQ's own path.
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
        if not lean_success_applies(job):
            super().handle_job_success(job, queue, started_job_registry, execution)
            return
        assert job.started_at is not None and job.ended_at is not None
        with self.connection.pipeline(transaction=False) as pipeline:
            self.increment_successful_job_count(pipeline=pipeline)
            pipeline.delete(job.key)
            started_job_registry.remove_execution(execution, pipeline=pipeline)
            self.set_state(WorkerStatus.IDLE, pipeline=pipeline)  # in memory (set_state)
            pipeline.execute()
        self.executions.pop(execution.id, None)
        self.log.info("Successfully completed job %s in %ss on worker %s", job.id, job.ended_at - job.started_at,
                      self.name)

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

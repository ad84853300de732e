"""Exactly the RQ API the job system relies on (pyproject pins RQ's major version): names and
signatures the lanes call or override (worker/grading_worker.py, worker/lane.py, worker/lanes.py,
app/jobs), and the behaviours they depend on, each run on a real Redis with RQ's own worker. An
RQ upgrade that changes any of it fails here, by name, rather than in a lane at run time.

Nothing here reaches into RQ's private names: if a test needs one, the code does too, and that is
the bug to fix."""

from __future__ import annotations

import inspect
import json
import re
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, cast

import pytest
import redis
import rq
from redis.client import PubSubWorkerThread
from rq import Queue, Retry, SimpleWorker, Worker, get_current_job
from rq.exceptions import NoSuchJobError, StopRequested
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, FinishedJobRegistry, StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.timeouts import BaseDeathPenalty, UnixSignalDeathPenalty
from rq.worker import BaseWorker, WorkerStatus

from app.jobs import keys, presence, rq_enqueue
from app.jobs.grade_log import grade_count
from app.jobs.leases import Lease, new_token
from app.jobs.rq_bookkeeping import LeanBookkeeping
from app.jobs.rq_enqueue import LeanEnqueue
from app.jobs.worker_registry import running_jobs, worker_state
from tests.support.forked import report_from_fork
from tests.support.tcp_proxy import CountingProxy
from worker.deadline import GradingDeadline, JobDeadline
from worker.grading_worker import GradingWorker

ROOT = Path(__file__).resolve().parents[2]


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def _calls_since_reset(connection: Any) -> dict[str, int]:
    """Redis's calls of each command since CONFIG RESETSTAT (that command itself left out)."""
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in connection.info("commandstats").items()}
    calls.pop("config|resetstat", None)
    return calls


def test_the_installed_rq_is_the_pinned_major_version() -> None:
    pins = [d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
            if d.replace(" ", "").startswith("rq>")]
    assert pins == ["rq>=3.0,<4"]  # a new major version is a reviewed change of this pin and this file
    assert int(rq.__version__.split(".")[0]) == 3


# ------------------------------------------------------------------ names and signatures


@pytest.mark.parametrize(("method", "parameters"), [
    ("execute_job", ["self", "job", "queue"]),  # the method RQ leaves to worker classes
    ("prepare_execution", ["self", "job"]),
    ("perform_job", ["self", "job", "queue", "execution"]),
    ("serialize", ["self"]),  # the worker's record, put back by a beat that finds its key expired
    ("set_state", ["self", "state", "pipeline"]),
    ("heartbeat", ["self", "timeout", "pipeline"]),
    ("get_heartbeat_ttl", ["self", "job", "working_time"]),
    ("register_birth", ["self"]),
    ("register_death", ["self"]),
    ("get_current_job_id", ["self"]),
    ("get_current_job", ["self"]),
    ("queue_names", ["self"]),
    ("get_state", ["self"]),
    ("clean_registries", ["self"]),
    ("run_maintenance_tasks", ["self"]),
    # overridden or called by app.jobs.rq_bookkeeping
    ("prepare_job_execution", ["self", "job", "remove_from_intermediate_queue"]),
    ("handle_execution_ended", ["self", "job", "queue", "heartbeat_ttl"]),
    ("handle_job_success", ["self", "job", "queue", "started_job_registry", "execution"]),
    ("check_for_suspension", ["self", "burst"]),
    ("increment_successful_job_count", ["self", "pipeline"]),
    ("procline", ["self", "message"]),
    ("handle_warm_shutdown_request", ["self"]),  # RQ's first-signal hook (worker.grading_worker)
    # the command channel: subscribed at the start, left by worker.grading_worker's own order
    ("subscribe", ["self"]),
    ("unsubscribe", ["self"]),
])
def test_the_worker_methods_the_lanes_call_or_override(method: str, parameters: list[str]) -> None:
    assert _parameters(getattr(SimpleWorker, method)) == parameters
    assert not method.startswith("_")


def test_the_lanes_clean_every_registry_rq_s_own_pass_cleans() -> None:
    # GradingWorker.clean_registries is RQ's, with the StartedJobRegistry cleaned in Redis's time:
    # an RQ that cleans one more registry, or another step, must fail here
    import rq.registry
    import rq.worker.base

    import worker.grading_worker

    ours = inspect.getsource(worker.grading_worker.GradingWorker.clean_registries)
    registries = {"FinishedJobRegistry": "finished_job_registry", "StartedJobRegistry": "started_job_registry",
                  "FailedJobRegistry": "failed_job_registry", "DeferredJobRegistry": "deferred_job_registry",
                  "ReadyJobRegistry": "ready_job_registry", "RateLimitRegistry": "RateLimitRegistry"}
    theirs = inspect.getsource(rq.registry.clean_registries)
    assert set(re.findall(r"\b(\w+Registry)\b", theirs)) == set(registries)
    for name in registries.values():
        assert name in ours, name
    assert "self._requeue_stranded()" in ours  # in place of RQ's intermediate_queue.cleanup (worker.dequeue)
    steps = ("acquire_maintenance_lock", "clean_registries(queue", "clean_worker_registry(queue)",
             "intermediate_queue.cleanup(self, queue)", "release_maintenance_lock", "last_cleaned_at = now()")
    rq_own = inspect.getsource(rq.worker.base.BaseWorker.clean_registries)
    assert all(step in rq_own for step in steps)
    assert len(re.findall(r"^\s+\S", rq_own, re.M)) <= 12  # nothing added to RQ's few lines
    assert _parameters(StartedJobRegistry.cleanup) == ["self", "timestamp", "exception_handlers"]


def test_the_dequeue_the_lanes_replace_is_the_queue_class_s() -> None:
    # worker.dequeue.LaneQueue: RQ's loop takes each job through its queue class's dequeue_any
    # (the worker's documented queue_class) and takes DequeueTimeout for an empty wait
    import rq.worker.base
    from rq.exceptions import DequeueTimeout
    from rq.intermediate_queue import IntermediateQueue

    loop = inspect.getsource(rq.worker.base.BaseWorker.dequeue_job_and_maintain_ttl)
    assert "self.queue_class.dequeue_any(" in loop and "except DequeueTimeout" in loop
    assert issubclass(DequeueTimeout, Exception)
    assert "queue_class" in _parameters(BaseWorker.__init__)
    assert _parameters(Queue.dequeue_any) == ["queues", "timeout", "connection", "job_class", "serializer",
                                             "death_penalty_class"]
    assert _parameters(Queue.from_queue_key) == ["queue_key", "connection", "job_class", "serializer",
                                                "death_penalty_class"]
    assert _parameters(Job.key_for) == ["job_id"]
    assert Queue.redis_queue_namespace_prefix == "rq:queue:"
    # the job's hash, read by the maintenance's script by key (status, enqueued_at)
    assert Job.key_for("j") == Job.redis_job_namespace_prefix + "j"
    # the intermediate list, as RQ's single-queue dequeue fills it and its clean-up reads it
    assert _parameters(IntermediateQueue.get_intermediate_queue_key) == ["queue_key"]
    assert inspect.getsource(Queue.lmove).count("IntermediateQueue(queue_key") == 1  # RQ's own take fills it
    assert isinstance(inspect.getattr_static(Queue, "intermediate_queue_key"), property)


def test_the_command_thread_can_be_told_to_end_without_waiting_for_it() -> None:
    assert _parameters(PubSubWorkerThread.stop) == ["self", "timeout"]


def test_the_worker_constructor_takes_the_settings_the_lanes_pass() -> None:
    accepted = set(_parameters(BaseWorker.__init__))
    assert {"queues", "name", "connection", "serializer", "job_monitoring_interval", "maintenance_interval",
            "worker_ttl"} <= accepted


def test_work_takes_the_arguments_the_lanes_pass() -> None:
    assert {"burst", "logging_level", "with_scheduler"} <= set(_parameters(BaseWorker.work))


def test_the_hooks_and_attributes_overridden_are_rq_s() -> None:
    # overridden in GradingWorker: each must still exist on RQ's class, or the override is dead code
    assert isinstance(inspect.getattr_static(BaseWorker, "should_run_maintenance_tasks"), property)
    assert inspect.getattr_static(BaseWorker, "dequeue_timeout") is not None
    assert SimpleWorker.death_penalty_class is UnixSignalDeathPenalty  # the documented hook, and its default
    assert issubclass(JobDeadline, UnixSignalDeathPenalty) and issubclass(UnixSignalDeathPenalty, BaseDeathPenalty)
    assert set(_parameters(BaseDeathPenalty.__init__)) >= {"timeout", "exception", "kwargs"}
    for name in ("setup_death_penalty", "cancel_death_penalty", "handle_death_penalty"):
        assert callable(getattr(UnixSignalDeathPenalty, name))
    assert Worker.redis_worker_namespace_prefix == "rq:worker:"
    assert _parameters(Worker.find_by_key)[:3] == ["worker_key", "connection", "job_class"]
    assert WorkerStatus.IDLE == "idle" and WorkerStatus.BUSY == "busy"
    assert issubclass(StopRequested, Exception) and issubclass(NoSuchJobError, Exception)
    # every public method GradingWorker overrides is one RQ defines (no private name is touched)
    for cls in (GradingWorker, LeanBookkeeping):
        overridden = {n for n in vars(cls) if callable(getattr(cls, n)) or isinstance(vars(cls)[n], property)}
        for name in overridden:
            # a public name is RQ's hook; a private one is the service's own and shadows none of RQ's
            assert hasattr(SimpleWorker, name) != name.startswith("_"), name
    assert issubclass(GradingWorker, LeanBookkeeping) and issubclass(LeanBookkeeping, SimpleWorker)


def test_the_execution_the_lean_bookkeeping_registers_and_removes_is_rq_s() -> None:
    # app.jobs.rq_bookkeeping makes RQ's Execution object (not its records) and enters it in the
    # StartedJobRegistry with RQ's own calls
    assert _parameters(Execution.__init__) == ["self", "id", "job_id", "connection", "worker_name"]
    assert _parameters(StartedJobRegistry.remove_execution)[:4] == ["self", "execution", "job", "pipeline"]
    # the heartbeat renews the execution's registry entry alone (worker.grading_worker)
    assert _parameters(StartedJobRegistry.add_execution) == ["self", "execution", "pipeline", "ttl", "xx"]
    assert isinstance(inspect.getattr_static(Job, "started_job_registry"), property)
    assert isinstance(inspect.getattr_static(Execution, "composite_key"), property)
    # the maintenance pass between RQ's whole ones looks for abandoned jobs alone
    assert isinstance(inspect.getattr_static(Queue, "started_job_registry"), property)
    assert _parameters(StartedJobRegistry.cleanup) == ["self", "timestamp", "exception_handlers"]
    # the status page counts and lists the running jobs without RQ's cleanup, and reads each
    # one's worker from the job (app.jobs.worker_registry)
    assert _parameters(StartedJobRegistry.get_job_count) == ["self", "cleanup"]
    assert _parameters(StartedJobRegistry.get_job_ids) == ["self", "start", "end", "desc", "cleanup"]
    assert _parameters(Job.prepare_for_execution) == ["self", "worker_name", "pipeline"]
    for name in ("has_rate_limit", "success_callback", "key"):
        assert isinstance(inspect.getattr_static(Job, name), property), name
    assert isinstance(inspect.getattr_static(Queue, "intermediate_queue_key"), property)


def test_the_queue_calls_the_api_makes() -> None:
    assert {"timeout", "result_ttl", "failure_ttl", "job_id", "meta", "retry"} <= set(_parameters(Queue.enqueue_call))
    # the lean enqueue (app.jobs.rq_enqueue)
    assert {"func", "args", "timeout", "result_ttl", "failure_ttl", "job_id", "meta", "retry", "status"} <= set(
        _parameters(Queue.create_job))
    assert _parameters(Queue.push_job_id) == ["self", "job_id", "pipeline", "at_front"]
    assert _parameters(Job.save)[:2] == ["self", "pipeline"]
    assert _parameters(Queue.get_redis_server_version) == ["self"]
    assert isinstance(inspect.getattr_static(Queue, "redis_queues_keys"), str)
    assert set(_parameters(Retry.__init__)) >= {"max", "interval", "enqueue_at_front"}
    assert JobStatus.STARTED == "started" and JobStatus.QUEUED == "queued"


# ------------------------------------------------------------------ behaviours, on a real Redis


def sleeps(seconds: float) -> str:
    """A job (importable by name, as RQ needs)."""
    time.sleep(seconds)
    return "slept"


def fails() -> None:
    raise RuntimeError("this job fails")


def reports_its_job() -> str:
    job = get_current_job()
    assert job is not None
    return job.id


def _worker(connection: Any, name: str, cls: type[BaseWorker] = SimpleWorker, **kwargs: Any) -> BaseWorker:
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    return cls([queue], connection=connection, serializer=JSONSerializer, name=name, **kwargs)


def test_a_simple_worker_runs_a_job_in_its_own_process_and_keeps_the_result(redis_server) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    # (kept 600 s, not 60: RQ's own worker can take a minute to leave its command channel, and
    # a result kept 60 s was once gone when the test read it: app.jobs.command_channel)
    job = queue.enqueue(reports_its_job, job_id="contract-own", result_ttl=600)
    assert _worker(connection, "runs").work(burst=True, with_scheduler=False) is True
    job = Job.fetch("contract-own", connection=connection, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FINISHED and job.return_value() == "contract-own"


def test_enqueue_keeps_the_settings_the_api_passes(redis_server) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 0, job_id="contract-settings", job_timeout=7, result_ttl=11, failure_ttl=13,
                  retry=Retry(max=2, enqueue_at_front=True), meta={"tenant": "t"})
    job = Job.fetch("contract-settings", connection=connection, serializer=JSONSerializer)
    assert (job.timeout, job.result_ttl, job.failure_ttl, job.meta, job.retries_left) == (7, 11, 13, {"tenant": "t"}, 2)
    assert job.origin == "contract" and job.get_status() == JobStatus.QUEUED


def _record(connection: Any, job_id: str) -> dict[bytes, bytes]:
    """A job's RQ record, without the fields that hold the moment it was made."""
    record = connection.hgetall(f"rq:job:{job_id}")
    for moment in (b"created_at", b"enqueued_at"):
        assert record.pop(moment)
    return record


def test_the_lean_enqueue_writes_rq_s_own_record_in_two_commands(redis_server) -> None:
    # how the API enqueues (app.jobs.redis_jobs._enqueue): the record and the push, no MULTI/EXEC,
    # the queue registered with a process's first job of it
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    settings = {"timeout": 7, "result_ttl": 0, "failure_ttl": 13, "meta": {"tenant": "t"}}
    queue.enqueue_call(sleeps, args=(0,), job_id="contract-rq", retry=Retry(max=2, enqueue_at_front=True), **settings)
    connection.delete("rq:queues")
    lean = LeanEnqueue()
    connection.config_resetstat()
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="contract-lean-1", retry=Retry(max=2, enqueue_at_front=True),
                 **settings)
    assert _calls_since_reset(connection) == {"sadd": 1, "hset": 1, "rpush": 1}
    assert connection.smembers("rq:queues") == {b"rq:queue:contract"}
    connection.config_resetstat()
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="contract-lean-2", retry=Retry(max=2, enqueue_at_front=True),
                 **settings)
    assert _calls_since_reset(connection) == {"hset": 1, "rpush": 1}
    rq_own = _record(connection, "contract-rq")
    for job_id in ("contract-lean-1", "contract-lean-2"):
        assert _record(connection, job_id) == rq_own  # field for field, but the moments it was made
        job = Job.fetch(job_id, connection=connection, serializer=JSONSerializer)
        kept = (job.timeout, job.result_ttl, job.failure_ttl, job.meta, job.retries_left)
        assert kept == (7, 0, 13, {"tenant": "t"}, 2)
        assert job.origin == "contract" and job.get_status() == JobStatus.QUEUED and job.enqueued_at is not None
    assert queue.get_job_ids() == ["contract-rq", "contract-lean-1", "contract-lean-2"]  # at the back, like RQ's
    # and RQ's worker runs them as its own
    assert _worker(connection, "runs-lean").work(burst=True, with_scheduler=False) is True
    assert queue.get_job_ids() == [] and queue.failed_job_registry.count == 0
    assert not connection.exists("rq:job:contract-lean-2")  # ran and succeeded: result_ttl=0 drops it


def test_the_lean_enqueue_registers_the_queue_again_after_a_while(redis_server, monkeypatch) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    lean = LeanEnqueue()
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="contract-first", timeout=7)
    connection.flushall()  # Redis lost its data
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="contract-soon", timeout=7)
    assert not connection.exists("rq:queues")  # within the period: not yet
    monkeypatch.setattr(rq_enqueue, "REGISTER_EVERY_SECONDS", 0.0)
    lean.enqueue(queue, func=sleeps, args=(0,), job_id="contract-later", timeout=7)
    assert connection.smembers("rq:queues") == {b"rq:queue:contract"}


def test_the_death_penalty_class_ends_a_job_with_the_exception_it_raises(redis_server) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 30, job_id="contract-deadline", job_timeout=1)

    class Deadlined(SimpleWorker):
        death_penalty_class = JobDeadline

    # in a fork: SIGALRM is also the test runner's own timeout
    report_from_fork(lambda: {"worked": _worker(redis_server.client(), "deadlined", Deadlined).work(
        burst=True, with_scheduler=False)})
    job = Job.fetch("contract-deadline", connection=connection, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FAILED
    result = job.latest_result()
    assert result is not None and GradingDeadline.__name__ in (result.exc_string or "")


def test_a_failed_job_with_retries_goes_back_to_the_front_of_its_queue(redis_server) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(fails, job_id="contract-fails", retry=Retry(max=1, enqueue_at_front=True))
    queue.enqueue(sleeps, 0, job_id="contract-behind")
    _worker(connection, "retries").work(burst=True, with_scheduler=False, max_jobs=1)
    assert queue.get_job_ids() == ["contract-fails", "contract-behind"]


def test_a_job_whose_heartbeats_lapse_is_requeued_at_the_front_by_another_worker(redis_server) -> None:
    # What a killed lane leaves: a started job whose execution's heartbeat TTL lapses. Another
    # worker's maintenance (clean_registries) re-queues it, at the front, with its Retry.
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 0, job_id="contract-abandoned", retry=Retry(max=1, enqueue_at_front=True))
    queue.enqueue(sleeps, 0, job_id="contract-waiting")
    dead = _worker(connection, "dies", GradingWorker, job_monitoring_interval=1)
    dead.heartbeat_grace = 1  # type: ignore[attr-defined]
    dead.register_birth()
    job = Job.fetch(queue.pop_job_id(), connection=connection, serializer=JSONSerializer)  # type: ignore[arg-type]
    execution = dead.prepare_execution(job)
    dead.prepare_job_execution(job)
    assert execution.id and job.get_status() == JobStatus.STARTED
    assert job.id in queue.started_job_registry.get_job_ids()
    time.sleep(dead.get_heartbeat_ttl(job) + 1.5)  # no beat: the lane is "dead"
    _worker(connection, "alive").clean_registries()
    assert job.get_status() == JobStatus.QUEUED
    assert queue.get_job_ids() == ["contract-abandoned", "contract-waiting"]


def _started(connection: Any, queue: Queue, name: str) -> tuple[GradingWorker, Job, Execution, None]:
    """A GradingWorker (TTL 2 s) with a job it has started."""
    worker = _worker(connection, name, GradingWorker, job_monitoring_interval=1)
    worker.heartbeat_grace = 1  # type: ignore[attr-defined]
    worker.register_birth()
    job = Job.fetch(queue.pop_job_id(), connection=connection, serializer=JSONSerializer)  # type: ignore[arg-type]
    execution = worker.prepare_execution(job)
    worker.prepare_job_execution(job)
    return worker, job, execution, None  # type: ignore[return-value]


def _running(connection: Any, queue: Queue, name: str) -> tuple[GradingWorker, Job, Execution, Lease]:
    """A GradingWorker (TTL 2 s) with a job it has started, and the job's lease taken."""
    worker, job, execution, _ = _started(connection, queue, name)
    lease = worker._job_lease(job, execution)
    assert lease.take(60) == 1
    return worker, job, execution, lease


def _lapsed(connection: Any, name: str) -> tuple[Queue, GradingWorker, Job, Execution, Lease]:
    """A job started by a GradingWorker (TTL 2 s) that then sent no beat past its TTL."""
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 0, job_id=f"contract-{name}", retry=Retry(max=1, enqueue_at_front=True))
    worker, job, execution, lease = _running(connection, queue, name)
    time.sleep(worker.get_heartbeat_ttl(job) + 1.5)
    return queue, worker, job, execution, lease


def test_the_lean_beat_keeps_a_running_job_from_being_taken_for_abandoned(redis_server) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 0, job_id="contract-beating", retry=Retry(max=1, enqueue_at_front=True))
    live, job, execution, lease = _running(connection, queue, "beats")
    deadline = time.monotonic() + 2 * live.get_heartbeat_ttl(job) + 1
    while time.monotonic() < deadline:  # beats as the lane's beat thread does, past two TTLs
        live._beat_once(job, execution, lease)
        time.sleep(0.5)
    _worker(connection, "looks").clean_registries()
    assert job.get_status() == JobStatus.STARTED and queue.get_job_ids() == []
    assert not lease.lost and connection.pttl(keys.lease(job.id)) > 0
    connection.config_resetstat()  # a beat with the worker's key fresh: the lease and the entry, nothing else
    live._beat_once(job, execution, lease)
    calls = _calls_since_reset(connection)
    assert calls == {"zadd": 1}, calls  # the entry, which is the lease too
    # the entry RQ's add_execution wrote (prepare_execution), moved ahead: not a second one
    registry = queue.started_job_registry
    assert connection.zrange(registry.key, 0, -1) == [execution.composite_key.encode()]
    assert connection.zscore(registry.key, execution.composite_key) > time.time() + live.get_heartbeat_ttl(job) - 1
    # the status page sees the job, and RQ's per-execution records were never written
    assert running_jobs(connection, ["contract"])[live.name]["id"] == job.id
    assert not [k for k in connection.scan_iter("rq:execution*")]
    assert not connection.exists(f"rq:worker:{live.name}:executions")


def test_a_job_s_start_is_three_commands_and_no_execution_record(redis_server) -> None:
    # the StartedJobRegistry entry, the job's started record and the id off the intermediate list
    # (worker.dequeue): not the worker's busy state (the registry says it), nor RQ's execution
    # hash and its two indexes (7 commands more)
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 0, job_id="contract-start")
    worker = _worker(connection, "starts", GradingWorker)
    worker.register_birth()
    worker.set_state(WorkerStatus.IDLE)  # as RQ's loop does before it dequeues: written
    assert connection.hget(worker.key, "state") == b"idle"
    job = Job.fetch(queue.pop_job_id(), connection=connection, serializer=JSONSerializer)  # type: ignore[arg-type]
    connection.config_resetstat()
    execution = worker.prepare_execution(job)
    assert _calls_since_reset(connection) == {"zadd": 1, "hset": 1, "lrem": 1}
    # busy in memory (RQ's warm stop waits for the job of a busy worker), not in Redis
    assert worker.get_state() == WorkerStatus.BUSY and connection.hget(worker.key, "state") == b"idle"
    assert job.get_status() == JobStatus.STARTED and job.worker_name == "starts"
    assert queue.started_job_registry.get_job_and_execution_ids(cleanup=False) == [(job.id, execution.id)]
    running = running_jobs(connection, ["contract"])
    assert running["starts"]["id"] == job.id
    hydrated = GradingWorker.find_by_key(worker.key, connection=connection)
    assert hydrated is not None and worker_state(hydrated, running) == "busy"
    assert worker_state(hydrated, {}) == str(hydrated.get_state()) != "busy"  # RQ's record: not written busy
    assert not [k for k in connection.scan_iter("rq:execution*")]


def test_the_maintenance_between_rq_s_whole_passes_requeues_an_abandoned_job_and_nothing_else(redis_server) -> None:
    connection = redis_server.client()
    queue, _, job, _, _ = _lapsed(connection, "left")
    alive = _worker(connection, "keeps", GradingWorker)
    connection.set(keys.MINUTE_MAINTENANCE, "another lane", ex=60)  # RQ's whole pass ran a moment ago
    connection.config_resetstat()
    alive.run_maintenance_tasks()
    assert job.get_status() == JobStatus.QUEUED and queue.get_job_ids() == ["contract-left"]
    calls = _calls_since_reset(connection)
    assert "smembers" not in calls and "exists" not in calls, calls  # no walk over the registered workers
    assert not [k for k in connection.scan_iter("rq:execution*")]  # none was written
    connection.config_resetstat()  # with nothing abandoned, a pass is one command a queue
    alive.run_maintenance_tasks()
    calls = _calls_since_reset(connection)
    assert calls == {"zrangebyscore": 1}, calls  # the queue's look (whose turn the whole pass is: asked once a minute)
    connection.delete(keys.MINUTE_MAINTENANCE)  # its minute is over: a lane that asks runs RQ's whole pass
    _worker(connection, "whole", GradingWorker).run_maintenance_tasks()
    assert connection.get(keys.MINUTE_MAINTENANCE) == b"whole"
    assert connection.get(keys.REGISTRY_MAINTENANCE) == b"whole"


def test_a_lean_beat_after_rq_took_the_job_for_abandoned_neither_restores_it_nor_keeps_the_lease(redis_server) -> None:
    # a lane stopped past its TTL: RQ re-queued the job and another attempt took the lease over;
    # the stopped lane's next beat must not put its execution back in the registry (which would
    # keep RQ from re-queueing the job again should the new attempt die, and would make the
    # stale attempt look alive again) nor touch the new holder's lease
    connection = redis_server.client()
    queue, stale, job, execution, lease = _lapsed(connection, "stale")
    _worker(connection, "alive").clean_registries()
    assert job.get_status() == JobStatus.QUEUED
    other = Lease(connection, job.id, new_token("other"), 60_000, registry=queue.started_job_registry.key)
    assert other.take(60) == 2  # the stale attempt's entry is gone: its lease is taken over
    connection.config_resetstat()
    stale._beat_once(job, execution, lease)
    assert lease.lost
    calls = _calls_since_reset(connection)
    assert calls.pop("zadd") == 1 and set(calls) <= {"hset", "expire"}, calls  # the worker's key, due by now
    assert execution.composite_key not in [m.decode() for m in connection.zrange(queue.started_job_registry.key, 0, -1)]
    assert connection.get(keys.lease(job.id)).decode() == other.token
    assert 55_000 < connection.pttl(keys.lease(job.id)) <= 60_000
    count = grade_count("exam", "numeric", "correct", tenant="t")
    assert lease.publish('{"reward": 0.0}', "t", 60, count) == -1  # fenced while the new attempt lives
    assert other.publish('{"reward": 1.0}', "t", 60, count) == 1
    assert lease.publish('{"reward": 0.0}', "t", 60, count) == 0


def test_a_beat_past_the_entry_s_ttl_before_rq_looked_keeps_the_job(redis_server) -> None:
    # stopped past the TTL, resumed before any maintenance ran: the beat finds the entry still
    # there (no one re-queued the job) and puts it ahead of the clock again, so the lease is held
    # again: RQ's look does not take the job for abandoned, another attempt cannot take it over,
    # and the result is written once, by this attempt
    connection = redis_server.client()
    queue, lane, job, execution, lease = _lapsed(connection, "resumed")
    meanwhile = Lease(connection, job.id, new_token("twice"), 60_000, registry=queue.started_job_registry.key)
    lane._beat_once(job, execution, lease)
    assert not lease.lost
    _worker(connection, "looks").clean_registries()
    assert job.get_status() == JobStatus.STARTED and queue.get_job_ids() == []  # not taken for abandoned
    assert meanwhile.take(60) == -1
    assert lease.publish('{"reward": 1.0}', "t", 60, grade_count("exam", "numeric", "correct", tenant="t")) == 1
    assert meanwhile.take(60) == 0


def test_an_attempt_of_a_job_rq_holds_twice_waits_while_the_other_lives_and_takes_over_once_it_died(
        redis_server) -> None:
    # a job RQ holds twice (app.jobs.redis_jobs): two lanes start it; the second waits while the
    # first beats, and takes the lease over once RQ's cleanup took the first's lapsed entry (that
    # lane died) for abandoned
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    for _ in range(2):
        queue.enqueue(sleeps, 0, job_id="contract-twice", retry=Retry(max=1, enqueue_at_front=True))
    first, job, execution, lease = _running(connection, queue, "first")
    second_lane, second_job, second_execution, _ = _started(connection, queue, "second")
    second = second_lane._job_lease(second_job, second_execution)
    count = grade_count("exam", "numeric", "correct", tenant="t")
    first._beat_once(job, execution, lease)
    assert second.take(60) == -1
    deadline = time.monotonic() + 10  # the first lane died: its entry lapses, and RQ's look finds it
    while second.take(60) == -1 and time.monotonic() < deadline:
        second_lane._beat_once(second_job, second_execution, second)
        _worker(connection, "looks").clean_registries()
        time.sleep(0.2)
    assert second.taken and connection.get(keys.lease(job.id)).decode() == second.token
    assert lease.publish('{"reward": 0.0}', "t", 60, count) == -1  # the dead one comes back: fenced
    assert second.publish('{"reward": 1.0}', "t", 60, count) == 1


# ------------------------------------------------------------------ the lean bookkeeping (app.jobs.rq_bookkeeping)


def _rq_records_of(connection: Any, job_id: str) -> list[str]:
    """Every RQ key that names the job, and every RQ registry or index that holds it."""
    named = [k.decode() for k in connection.scan_iter(f"rq:*{job_id}*")]
    members = {b"zset": lambda key: connection.zrange(key, 0, -1), b"set": connection.smembers,
               b"list": lambda key: connection.lrange(key, 0, -1)}
    held = [key.decode() for key in connection.scan_iter("rq:*")
            if (read := members.get(connection.type(key))) and any(job_id in m.decode() for m in read(key))]
    return named + held


@pytest.mark.parametrize("queues", [1, 2])  # a worker of one queue goes through RQ's intermediate queue
def test_a_job_that_succeeds_under_the_lean_bookkeeping_leaves_no_rq_record(redis_server, queues) -> None:
    connection = redis_server.client()
    served = [Queue(name, connection=connection, serializer=JSONSerializer) for name in ("contract", "other")[:queues]]
    served[0].enqueue(reports_its_job, job_id="contract-lean", result_ttl=0, retry=Retry(max=1, enqueue_at_front=True))
    worker = LeanBookkeeping(served, connection=connection, serializer=JSONSerializer, name="lean")
    assert worker.work(burst=True, with_scheduler=False) is True
    assert _rq_records_of(connection, "contract-lean") == []  # job, executions, registries, results: none
    assert connection.hget("rq:worker:lean", "successful_job_count") == b"1"
    assert worker.get_state() == WorkerStatus.IDLE and connection.hget("rq:worker:lean", "state") == b"idle"
    assert not connection.exists("rq:worker:lean:executions")


def test_the_lean_bookkeeping_counts_a_run_of_jobs_done_in_one_command(redis_server) -> None:
    # RQ's count of the worker's jobs done (the status page's): one command for the run, not one a
    # job; a worker that stops sends what it holds (RQ keeps its record a minute)
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    for n in range(3):
        queue.enqueue(reports_its_job, job_id=f"contract-run-{n}", result_ttl=0)
    proxy = CountingProxy(redis_server.port, b"successful_job_count")
    try:
        through = redis.Redis.from_url(proxy.url)
        worker = LeanBookkeeping([Queue("contract", connection=through, serializer=JSONSerializer)],
                                 connection=through, serializer=JSONSerializer, name="run")
        assert worker.work(burst=True, with_scheduler=False) is True
    finally:
        proxy.close()
    assert connection.hget("rq:worker:run", "successful_job_count") == b"3"
    assert proxy.seen == 1


def test_the_lean_bookkeeping_takes_rq_s_own_path_for_a_job_that_keeps_its_result(redis_server) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(reports_its_job, job_id="contract-kept", result_ttl=60)
    LeanBookkeeping([queue], connection=connection, serializer=JSONSerializer, name="keeps").work(
        burst=True, with_scheduler=False)
    job = Job.fetch("contract-kept", connection=connection, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FINISHED and job.return_value() == "contract-kept"
    assert "contract-kept" in FinishedJobRegistry("contract", connection=connection).get_job_ids()


def test_a_job_that_fails_under_the_lean_bookkeeping_takes_rq_s_failure_path(redis_server) -> None:
    # what the API reads of a job RQ gave up on: its failed status (app.jobs.redis_jobs.view)
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(fails, job_id="contract-lean-fails", result_ttl=0, failure_ttl=60)
    LeanBookkeeping([queue], connection=connection, serializer=JSONSerializer, name="lean-fails").work(
        burst=True, with_scheduler=False)
    job = Job.fetch("contract-lean-fails", connection=connection, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FAILED
    assert "contract-lean-fails" in FailedJobRegistry("contract", connection=connection).get_job_ids()
    assert queue.started_job_registry.get_job_ids() == []
    assert connection.hget("rq:worker:lean-fails", "state") == b"idle"


def test_a_suspension_check_is_one_exists_of_the_key_rq_suspend_sets(redis_server) -> None:
    from rq.suspension import WORKERS_SUSPENDED, resume, suspend

    connection = redis_server.client()
    suspend(connection)
    assert connection.exists(WORKERS_SUSPENDED)
    resume(connection)
    worker = _worker(connection, "checks", LeanBookkeeping)
    connection.config_resetstat()
    worker.check_for_suspension(burst=True)
    assert _calls_since_reset(connection) == {"exists": 1}


def test_a_suspension_stops_the_lean_worker_before_its_next_job(redis_server) -> None:
    from rq.suspension import resume, suspend

    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 0, job_id="contract-suspended")
    suspend(connection)
    try:  # burst mode checks before every job: a suspended burst worker quits without working
        assert LeanBookkeeping([queue], connection=connection, serializer=JSONSerializer,
                               name="suspended").work(burst=True, with_scheduler=False) is False
    finally:
        resume(connection)
    assert queue.get_job_ids() == ["contract-suspended"]


def test_a_presence_beat_is_one_command_and_the_name_is_listed_again_when_its_record_went(redis_server) -> None:
    """The lane's record is one SET a beat; its name goes on the list of workers at its first beat,
    at once after Redis lost the record (a flush), and every LIST_EVERY_SECONDS, not every beat."""
    connection = redis_server.client()
    worker = cast("GradingWorker", _worker(connection, "present", GradingWorker))
    worker.presence, worker.presence_ttl = json.dumps({"name": "present"}), 30

    def beat() -> dict[str, int]:
        worker._last_presence = float("-inf")  # due
        connection.config_resetstat()
        assert worker._publish_presence()
        return _calls_since_reset(connection)

    assert beat() == {"set": 1, "zadd": 1}  # the first: listed
    assert connection.zscore(presence.NAMES, "present") is not None
    assert beat() == {"set": 1}
    assert beat() == {"set": 1}
    connection.delete(presence.key("present"), presence.NAMES)  # as a flush leaves them
    assert beat() == {"set": 1, "zadd": 1}  # the record was missing: listed again at once
    assert connection.zscore(presence.NAMES, "present") is not None
    worker._listed_at -= presence.LIST_EVERY_SECONDS
    assert beat() == {"set": 1, "zadd": 1}  # the list's renewal, well inside the hour it forgets after


def test_a_lane_leaves_its_command_channel_promptly_whichever_thread_reads_the_reply_first(redis_server) -> None:
    # (app.jobs.command_channel) The interleaving that stalled a warm stop for a minute under load: RQ's command thread
    # reads UNSUBSCRIBE's reply before the thread is told to end, and goes back to wait for a
    # subscription (RQ's sleep time: 60 s) while redis-py's stop() waits for it without a bound.
    # Here the reply is always read first (the send waits until the thread has processed it).
    worker = GradingWorker([Queue("judge", connection=redis_server.client(), serializer=JSONSerializer)],
                           connection=redis_server.client(), serializer=JSONSerializer, name="leaving")
    worker.subscribe()
    pubsub, thread = worker.pubsub, worker.pubsub_thread
    send = pubsub.unsubscribe

    def unsubscribe_and_let_the_thread_read_the_reply(*args: Any) -> Any:
        sent = send(*args)
        deadline = time.monotonic() + 10
        while pubsub.subscribed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pubsub.subscribed, "the command thread never read the reply"
        return sent

    pubsub.unsubscribe = unsubscribe_and_let_the_thread_read_the_reply  # type: ignore[method-assign]
    leaving = threading.Thread(target=worker.unsubscribe, daemon=True)
    leaving.start()
    leaving.join(timeout=30)  # a stall is 60 s; nothing legitimate takes a tenth of that
    assert not leaving.is_alive(), "leaving the command channel stalled"
    thread.join(timeout=5)
    assert not thread.is_alive()
    clients = redis_server.client().client_list(_type="pubsub")
    assert clients == []  # nothing is left subscribed

"""Exactly the RQ API the job system relies on (pyproject pins RQ's major version): names and
signatures the lanes call or override (worker/grading_worker.py, worker/lane.py, worker/lanes.py,
app/jobs), and the behaviours they depend on, each run on a real Redis with RQ's own worker. An
RQ upgrade that changes any of it fails here, by name, rather than in a lane at run time.

Nothing here reaches into RQ's private names: if a test needs one, the code does too, and that is
the bug to fix."""

from __future__ import annotations

import inspect
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import rq
from rq import Queue, Retry, SimpleWorker, Worker, get_current_job
from rq.exceptions import NoSuchJobError, StopRequested
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.timeouts import BaseDeathPenalty, UnixSignalDeathPenalty
from rq.worker import BaseWorker, WorkerStatus

from tests.support.forked import report_from_fork
from worker.deadline import GradingDeadline, JobDeadline
from worker.grading_worker import GradingWorker

ROOT = Path(__file__).resolve().parents[2]


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


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
    ("maintain_heartbeats", ["self", "job", "execution"]),
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
])
def test_the_worker_methods_the_lanes_call_or_override(method: str, parameters: list[str]) -> None:
    assert _parameters(getattr(SimpleWorker, method)) == parameters
    assert not method.startswith("_")


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
    overridden = {n for n in vars(GradingWorker) if callable(getattr(GradingWorker, n)) or
                  isinstance(vars(GradingWorker)[n], property)}
    for name in overridden - {"_beat"}:
        assert not name.startswith("_"), name
        assert hasattr(SimpleWorker, name), name


def test_the_queue_calls_the_api_makes() -> None:
    assert {"timeout", "result_ttl", "failure_ttl", "job_id", "meta", "retry"} <= set(_parameters(Queue.enqueue_call))
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
    job = queue.enqueue(reports_its_job, job_id="contract-own", result_ttl=60)
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


def test_maintain_heartbeats_keeps_a_running_job_from_being_taken_for_abandoned(redis_server) -> None:
    connection = redis_server.client()
    queue = Queue("contract", connection=connection, serializer=JSONSerializer)
    queue.enqueue(sleeps, 0, job_id="contract-beating", retry=Retry(max=1, enqueue_at_front=True))
    live = _worker(connection, "beats", GradingWorker, job_monitoring_interval=1)
    live.heartbeat_grace = 1  # type: ignore[attr-defined]
    live.register_birth()
    job = Job.fetch(queue.pop_job_id(), connection=connection, serializer=JSONSerializer)  # type: ignore[arg-type]
    execution = live.prepare_execution(job)
    live.prepare_job_execution(job)
    deadline = time.monotonic() + 2 * live.get_heartbeat_ttl(job) + 1
    while time.monotonic() < deadline:  # beats as the lane's beat thread does, past two TTLs
        live.maintain_heartbeats(job, execution)
        time.sleep(0.5)
    _worker(connection, "looks").clean_registries()
    assert job.get_status() == JobStatus.STARTED and queue.get_job_ids() == []

"""Prometheus metrics read at scrape time by the API: queue depths and workers by state from
Redis, and the grade counter from the grade ledger (app.grade_ledger). In Redis mode these belong
to the deployment, not to one process: many deployments never scrape workers at all (they come and
go by the hundred), and every API replica reports the same figures: aggregate them across
replicas with max, not sum."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from rq import Worker
from rq.serializers import JSONSerializer

from app.grade_ledger import ledger
from app.jobs import grade_log, refusals
from app.jobs.redis_jobs import REDIS_ERRORS, sync_connection
from app.jobs.worker_registry import queue_depths, running_jobs, worker_state
from app.observability import REGISTRY


class QueueCollector(Collector):
    def __init__(self) -> None:
        self.connection: redis.Redis | None = None

    def describe(self) -> list[Any]:
        return []  # nothing to read at registration time; the figures come from Redis per scrape

    def collect(self) -> Iterator[Any]:
        if self.connection is None:  # embedded mode: no queue, no separate worker
            return
        up = GaugeMetricFamily("scaling_grader_redis_up", "1 when the API reached Redis at this scrape")
        try:
            depths = queue_depths(self.connection)
            workers = Worker.all(connection=self.connection, serializer=JSONSerializer)
            running = running_jobs(self.connection)
            refused = refusals.totals(self.connection)
        except REDIS_ERRORS:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = GaugeMetricFamily("scaling_grader_queue_jobs", "Jobs per grading queue and state",
                                 labels=["queue", "state"])
        age = GaugeMetricFamily("scaling_grader_queue_oldest_seconds",
                                "How long the job next out of each queue has waited (0: empty)", labels=["queue"])
        for queue, by_state in depths.items():
            for state, count in by_state.items():
                if state != "oldest_seconds":
                    jobs.add_metric([queue, state], count)
            age.add_metric([queue], by_state.get("oldest_seconds") or 0.0)
        yield jobs
        yield age
        deployment_refused = CounterMetricFamily(
            "scaling_grader_deployment_refused", "429 refusals by every API replica, by reason", labels=["reason"])
        for reason, count in sorted(refused.items()):
            deployment_refused.add_metric([reason], count)
        yield deployment_refused
        states: dict[str, int] = {"idle": 0, "busy": 0}
        for worker in workers:
            state = worker_state(worker, running)
            states[state] = states.get(state, 0) + 1
        live = GaugeMetricFamily("scaling_grader_workers", "Workers registered in RQ, by state", labels=["state"])
        for state, count in states.items():
            live.add_metric([state], count)
        yield live


class GradeCollector(Collector):
    """scaling_grader_grades_total from the grade ledger's running totals, the same figures the
    status page reads: in Redis mode every grade of the deployment (inline ones from every API
    process, queued ones from every worker), in embedded mode every grade of this process."""

    def __init__(self) -> None:
        self.connection: redis.Redis | None = None

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        with contextlib.suppress(redis.RedisError, *REDIS_ERRORS):  # else they wait for the next write
            ledger().flush()  # this process's pending counts are part of the figures
        try:
            counts = ledger().totals() if self.connection is None else grade_log.totals(self.connection)
        except REDIS_ERRORS:
            return  # scaling_grader_redis_up says why
        grades = CounterMetricFamily("scaling_grader_grades", "Grades by split, kind and outcome",
                                     labels=["split", "grading", "outcome"])
        for labels, count in sorted(counts.items()):
            grades.add_metric(list(labels), count)
        yield grades


QUEUE_COLLECTOR = QueueCollector()
GRADE_COLLECTOR = GradeCollector()
REGISTRY.register(QUEUE_COLLECTOR)
REGISTRY.register(GRADE_COLLECTOR)


def watch_queues(redis_url: str | None) -> None:
    """Report the queues and the grades of this Redis at /metrics (None: embedded mode, no queue,
    and the grades of this process's ledger). One service runs per process; in tests the app
    created last is the one reported."""
    connection = sync_connection(redis_url) if redis_url else None
    QUEUE_COLLECTOR.connection = GRADE_COLLECTOR.connection = connection

"""Prometheus metrics of the Redis side, read at scrape time by the API: queue depths, workers by
state, and the grades all workers completed. These belong to the deployment, not to one process:
a worker's own metrics (``--metrics-port``) see only its grades, and many deployments never
scrape workers at all (they come and go by the hundred). Every API replica reports the same
figures: aggregate them across replicas with max, not sum."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from rq import Worker
from rq.serializers import JSONSerializer

from app.jobs import grade_log, refusals
from app.jobs.redis_jobs import REDIS_ERRORS, sync_connection
from app.jobs.worker_registry import queue_depths
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
            totals = grade_log.totals(self.connection)
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
            state = str(worker.get_state())
            states[state] = states.get(state, 0) + 1
        live = GaugeMetricFamily("scaling_grader_workers", "Workers registered in RQ, by state", labels=["state"])
        for state, count in states.items():
            live.add_metric([state], count)
        yield live
        grades = CounterMetricFamily("scaling_grader_worker_grades", "Queued grades completed by all workers",
                                     labels=["split", "grading", "outcome"])
        for (split, grading, outcome), count in sorted(totals.items()):
            grades.add_metric([split, grading, outcome], count)
        yield grades


QUEUE_COLLECTOR = QueueCollector()
REGISTRY.register(QUEUE_COLLECTOR)


def watch_queues(redis_url: str | None) -> None:
    """Report the queues of this Redis at /metrics (None: embedded mode, nothing to report). One
    service runs per process; in tests the app created last is the one reported."""
    QUEUE_COLLECTOR.connection = sync_connection(redis_url) if redis_url else None

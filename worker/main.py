"""``scaling-grader worker``: RQ workers for the judge and impl queues, one process per job at once.

The process runs QUEUE__WORKER_JOBS jobs at once (default: one per core it is given), each in a
lane (worker.lanes): a process running one RQ worker. This process checks what must hold before
any lane starts, shares out the sandbox's per-process budgets between the lanes, serves their
metrics summed (--metrics-port), and supervises them; it runs no job itself."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

from app.cpus import cores_given
from app.metrics_scrape import share_between_processes
from app.sandbox.pool import shutdown_all
from app.sandbox.stop import plain_tier_error, remove_stale_leftovers
from app.settings import Settings
from worker.grading_worker import QUEUES
from worker.lanes import Lanes, lane_names, plan_lanes

__all__ = ["QUEUES", "lane_env", "run"]

log = logging.getLogger(__name__)


def lane_env(settings: Settings, lanes: int, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of each lane. SANDBOX__MAX_CONCURRENT_CASES bounds the cases of the whole
    worker (its default follows the cores the worker is given), and the warm pool's size was one
    pool for all of it: each lane, a process with a sandbox of its own, gets its share."""
    sandbox = settings.sandbox
    env = dict(base)
    env["SCALING_GRADER_SANDBOX__MAX_CONCURRENT_CASES"] = str(max(1, sandbox.max_concurrent_cases // lanes))
    warm = math.ceil(sandbox.warm_pool_size / lanes) if sandbox.warm_pool_size else 0
    env["SCALING_GRADER_SANDBOX__WARM_POOL_SIZE"] = str(warm)
    return env


def serve_metrics(port: int, host: str) -> None:
    """The lanes' metrics summed (Prometheus's multiprocess mode): the lanes are started with
    PROMETHEUS_MULTIPROC_DIR set, write their values there, and a scrape here adds them up."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    start_http_server(port, addr=host, registry=registry)


def run(settings: Settings, queues: tuple[str, ...] = QUEUES, burst: bool = False, name: str | None = None,
        metrics: tuple[int, str] | None = None) -> int:
    """Lanes (jobs at once): QUEUE__WORKER_JOBS, 0 meaning the cores this process is given."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not settings.redis_url:
        raise SystemExit("the worker needs SCALING_GRADER_REDIS_URL")
    if "impl" in queues:
        remove_stale_leftovers()
        try:
            refusal = plain_tier_error(settings, worker=True)
        finally:
            shutdown_all()  # the lanes probe for themselves; this process keeps no sandbox
        if refusal:
            log.error("refusing to start: %s", refusal)
            return 2
    if metrics is not None:
        share_between_processes()  # sets PROMETHEUS_MULTIPROC_DIR, which the lanes inherit
        serve_metrics(*metrics)
    lanes = settings.queue.worker_lanes
    names = lane_names(name, lanes)
    log.info("worker %s: %d lane(s) (jobs at once) on %d core(s) given; at most %d sandbox cases at once",
             names[0], lanes, cores_given(), settings.sandbox.max_concurrent_cases)
    env = lane_env(settings, lanes, os.environ)
    env["SCALING_GRADER_QUEUE__WORKER_JOBS"] = str(lanes)  # as resolved here (--jobs included)
    return Lanes(plan_lanes(names, queues, burst), env, settings.redis_url, burst=burst).run()

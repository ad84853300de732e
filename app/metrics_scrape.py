"""/metrics that add up across the API's processes.

``scaling-grader serve --workers N`` runs N processes behind one port; each would keep its own
counters and a scrape would see whichever process answered, so the figures jumped from scrape to
scrape. With more than one process, serve gives them a shared directory (Prometheus's
multiprocess mode, PROMETHEUS_MULTIPROC_DIR): every process writes its metric values there and
a scrape sums them, whichever process answers. The Redis-side figures (queues, workers, the
deployment's refusals) and the grade counter (from the grade ledger, which in Redis mode every
process writes its grades into) are read at scrape time, once: never summed over processes."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from app.jobs.queue_metrics import GRADE_COLLECTOR, QUEUE_COLLECTOR
from app.observability import REGISTRY

ENV = "PROMETHEUS_MULTIPROC_DIR"


def share_between_processes() -> Path:
    """Called by serve before its processes start: a directory for their values (an operator's
    own PROMETHEUS_MULTIPROC_DIR is used if set, emptied of a previous run's files first)."""
    given = os.environ.get(ENV)
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink()
        return directory
    directory = Path(tempfile.mkdtemp(prefix="scaling-grader-metrics-"))
    os.environ[ENV] = str(directory)
    _made.append(directory)
    atexit.register(remove_shared_directory)
    return directory


_made: list[Path] = []


def remove_shared_directory() -> None:
    """Remove the directory serve made (not an operator's own); at exit or on a stop signal."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def scrape() -> bytes:
    """The text of one scrape: this process's registry, or every process's values summed."""
    if not os.environ.get(ENV):
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    registry.register(QUEUE_COLLECTOR)
    registry.register(GRADE_COLLECTOR)
    return generate_latest(registry)

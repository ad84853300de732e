"""The one ledger of grade counts. Every grade is counted once, into the ledger of its process,
and both readers derive their figures from it: the status page (10-second buckets over five
minutes, the deployment's and each tenant's, and the last grader faults) and /metrics (running
totals per split, grading and outcome).

With no Redis (embedded mode, one process) the ledger is this module's ``MemoryLedger``. With
Redis it is ``app.jobs.redis_ledger.RedisLedger``: the API's inline grades go into the same Redis
keys the workers count queued grades in, so every API replica and process reads the whole
deployment. Labels only (split, grading, outcome, tenant name, route template): never a
completion, a task's answer or an explanation."""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

# Outcomes that mean the grader, not the candidate, failed: the status page lists the last ones.
FAULT_OUTCOMES = frozenset({"sandbox_error", "judge_error", "error"})
WINDOW_BUCKET_SECONDS = 10
WINDOW_BUCKETS = 30  # five minutes
KEEP_FAULTS = 20

Labels = tuple[str, str, str]  # split, grading, outcome
Window = dict[int, dict[tuple[str, str], int]]  # bucket start -> (split, outcome) -> grades


def bucket_start(now: float, bucket_seconds: int = WINDOW_BUCKET_SECONDS) -> int:
    return int(now) // bucket_seconds * bucket_seconds


class GradeLedger(Protocol):
    """What counts grades and what reads them back. ``tenant`` None is the deployment (the
    operator's view); a tenant's name reads that tenant's own grades and faults only."""

    def add(self, labels: Labels, tenant: str | None, now: float) -> None: ...

    def add_fault(self, kind: str, where: str, tenant: str | None, now: float) -> None: ...

    def totals(self) -> dict[Labels, int]: ...

    def window(self, tenant: str | None, now: float) -> Window: ...

    def faults(self, tenant: str | None) -> list[dict[str, Any]]: ...

    def flush(self) -> None:
        """Write what this process holds back to the shared store (nothing to do in memory)."""
        ...

    def close(self) -> None: ...


class GradeWindow:
    """Grades per (split, outcome) in 10-second buckets over the last five minutes, and the last
    faults, in this process's memory."""

    def __init__(self, bucket_seconds: int = WINDOW_BUCKET_SECONDS, buckets: int = WINDOW_BUCKETS) -> None:
        self.bucket_seconds, self.buckets = bucket_seconds, buckets
        self._counts: deque[tuple[int, dict[tuple[str, str], int]]] = deque(maxlen=buckets)
        # the newest bucket, also the last of _counts
        self._start = -1
        self._current: dict[tuple[str, str], int] = {}
        self._faults: deque[dict[str, Any]] = deque(maxlen=KEEP_FAULTS)
        self._lock = threading.Lock()

    def add(self, split: str, outcome: str, now: float | None = None) -> None:
        # On every grade: kept to a clock read, a lock and one dict update.
        start = bucket_start(time.time() if now is None else now, self.bucket_seconds)
        key = (split, outcome)
        with self._lock:
            if start > self._start:  # a clock stepped back counts in the newest bucket
                self._start, self._current = start, {}
                self._counts.append((start, self._current))
            current = self._current
            current[key] = current.get(key, 0) + 1

    def add_fault(self, kind: str, where: str, now: float | None = None) -> None:
        with self._lock:
            self._faults.append({"at": time.time() if now is None else now, "kind": kind, "where": where})

    def counts(self, now: float | None = None) -> Window:
        """Bucket start (epoch seconds) -> counts, for the buckets still inside the window."""
        now = time.time() if now is None else now
        horizon = now - self.bucket_seconds * self.buckets
        with self._lock:
            return {start: dict(c) for start, c in self._counts if start > horizon}

    def faults(self) -> list[dict[str, Any]]:
        """Newest first, as Redis's lists are read."""
        with self._lock:
            return list(reversed(self._faults))


class MemoryLedger:
    """The ledger of embedded mode: one process holds every count (``serve`` refuses several
    processes without Redis). Tenants are the names of the tenants file (or "local"): a closed
    set, so one window each stays bounded."""

    def __init__(self) -> None:
        self._totals: dict[Labels, int] = {}
        self._deployment = GradeWindow()
        self._tenants: dict[str, GradeWindow] = {}
        self._lock = threading.Lock()

    def _of(self, tenant: str | None) -> GradeWindow:
        if tenant is None:
            return self._deployment
        window = self._tenants.get(tenant)
        if window is None:
            with self._lock:
                window = self._tenants.setdefault(tenant, GradeWindow())
        return window

    def add(self, labels: Labels, tenant: str | None, now: float) -> None:
        with self._lock:
            self._totals[labels] = self._totals.get(labels, 0) + 1
        split, _, outcome = labels
        for window in (self._deployment,) if tenant is None else (self._deployment, self._of(tenant)):
            window.add(split, outcome, now)

    def add_fault(self, kind: str, where: str, tenant: str | None, now: float) -> None:
        for window in (self._deployment,) if tenant is None else (self._deployment, self._of(tenant)):
            window.add_fault(kind, where, now)

    def totals(self) -> dict[Labels, int]:
        with self._lock:
            return dict(self._totals)

    def window(self, tenant: str | None, now: float) -> Window:
        if tenant is not None and tenant not in self._tenants:
            return {}  # a reader makes no window
        return self._of(tenant).counts(now)

    def faults(self, tenant: str | None) -> list[dict[str, Any]]:
        if tenant is not None and tenant not in self._tenants:
            return []
        return self._of(tenant).faults()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


_ledger: list[GradeLedger] = [MemoryLedger()]
_elsewhere = threading.local()


def ledger() -> GradeLedger:
    return _ledger[0]


def use_ledger(new: GradeLedger) -> None:
    """Count this process's grades into ``new`` from now on (create_app, once per app: in tests
    the app made last is the one counted). The previous ledger writes out what it holds."""
    old, _ledger[0] = _ledger[0], new
    if old is not new:
        old.close()


def count(split: str, grading: str, outcome: str, tenant: str | None) -> None:
    """One grade, into the ledger (unless the caller's result write counts it: see below)."""
    labels = (split, grading, outcome)
    held: list[Labels] | None = getattr(_elsewhere, "labels", None)
    if held is not None:
        held.append(labels)
        return
    now = time.time()
    book = _ledger[0]
    book.add(labels, tenant, now)
    if outcome in FAULT_OUTCOMES:
        book.add_fault(outcome, f"{split}/{grading}", tenant, now)


@contextmanager
def counted_on_publish() -> Iterator[list[Labels]]:
    """A worker counts a queued grade in the script that writes its result, so that it is
    counted if and only if its result was written (app.jobs.leases). Grades made inside this
    block are not counted by the grading code: their labels, as it would have counted them (a
    held-out split's outcome as its tenant sees it), are handed to the caller to count with."""
    held: list[Labels] = []
    _elsewhere.labels = held
    try:
        yield held
    finally:
        _elsewhere.labels = None


atexit.register(lambda: _ledger[0].close())

"""Prometheus metrics, in a registry of our own so that several apps in one process (tests)
never collide, and a pure-ASGI middleware that times requests (cheaper than BaseHTTPMiddleware
on the grading hot path)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

REGISTRY = CollectorRegistry(auto_describe=True)

HTTP_REQUESTS = Counter(
    "scaling_grader_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=REGISTRY
)
HTTP_LATENCY = Histogram(
    "scaling_grader_http_request_seconds", "HTTP request latency", ["route"], registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
GRADES = Counter("scaling_grader_grades_total", "Grades by split, kind and outcome",
                 ["split", "grading", "outcome"], registry=REGISTRY)
GRADE_LATENCY = Histogram(
    "scaling_grader_grade_seconds", "Time to grade one item", ["grading"], registry=REGISTRY,
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60),
)
TENANT_REQUESTS = Counter("scaling_grader_tenant_requests_total", "Requests per tenant", ["tenant"],
                          registry=REGISTRY)
READY = Gauge("scaling_grader_ready", "1 when /readyz passes", registry=REGISTRY,
              multiprocess_mode="mostrecent")  # with several API processes: the last readyz answered


# Outcomes that mean the grader, not the candidate, failed: the status page lists the last ones.
FAULT_OUTCOMES = frozenset({"sandbox_error", "judge_error", "error"})
WINDOW_BUCKET_SECONDS = 10
WINDOW_BUCKETS = 30  # five minutes


class GradeWindow:
    """Grades per (split, outcome) in 10-second buckets over the last five minutes, and the last
    grader faults and server errors, for the status page. Labels only (split, outcome, kind,
    route template): never a completion, a task's answer or an explanation."""

    def __init__(self, bucket_seconds: int = WINDOW_BUCKET_SECONDS, buckets: int = WINDOW_BUCKETS) -> None:
        self.bucket_seconds, self.buckets = bucket_seconds, buckets
        self._counts: deque[tuple[int, dict[tuple[str, str], int]]] = deque(maxlen=buckets)
        # the newest bucket, also the last of _counts
        self._start = -1
        self._current: dict[tuple[str, str], int] = {}
        self._faults: deque[dict[str, Any]] = deque(maxlen=20)
        self._lock = threading.Lock()

    def add(self, split: str, outcome: str, now: float | None = None) -> None:
        # On every grade: kept to a clock read, a lock and one dict update.
        start = int(time.time() if now is None else now) // self.bucket_seconds * self.bucket_seconds
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

    def counts(self, now: float | None = None) -> dict[int, dict[tuple[str, str], int]]:
        """Bucket start (epoch seconds) -> counts, for the buckets still inside the window."""
        now = time.time() if now is None else now
        horizon = now - self.bucket_seconds * self.buckets
        with self._lock:
            return {start: dict(c) for start, c in self._counts if start > horizon}

    def faults(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._faults)


GRADE_WINDOW = GradeWindow()


class TenantWindows:
    """One GradeWindow per tenant, so that a tenant's status page shows its own grades and faults
    only. Tenants are the names of the tenants file (or "local"): a closed set."""

    def __init__(self) -> None:
        self._windows: dict[str, GradeWindow] = {}
        self._lock = threading.Lock()

    def of(self, tenant: str) -> GradeWindow:
        window = self._windows.get(tenant)
        if window is None:
            with self._lock:
                window = self._windows.setdefault(tenant, GradeWindow())
        return window


TENANT_WINDOWS = TenantWindows()

# The status nginx logs for a client that closed its connection before the answer.
CLIENT_CLOSED = 499
_children: dict[tuple, Any] = {}
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def child(metric: Any, *labels: str) -> Any:
    """metric.labels(*labels), remembered: label look-up costs more than the update itself, and
    both run on every grading request."""
    key = (id(metric), labels)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*labels)
    return found


# (split, grading, outcome) -> (grade counter, grade latency histogram); bounded like the labels.
_grade_series: dict[tuple[str, str, str], tuple[Any, Any]] = {}


def record_grade(split: str | None, grading: str, outcome: str, seconds: float, tenant: str | None = None) -> None:
    split = split or "inline"
    key = (split, grading, outcome)
    series = _grade_series.get(key)
    if series is None:
        series = _grade_series[key] = (child(GRADES, split, grading, outcome), child(GRADE_LATENCY, grading))
    series[0].inc()
    series[1].observe(seconds)
    windows = (GRADE_WINDOW,) if tenant is None else (GRADE_WINDOW, TENANT_WINDOWS.of(tenant))
    for window in windows:
        window.add(split, outcome)
        if outcome in FAULT_OUTCOMES:
            window.add_fault(outcome, f"{split}/{grading}")


class MetricsMiddleware:
    def __init__(self, app: Any) -> None:
        self.app = app
        # (method, route template, status) -> (request counter, latency histogram): one look-up
        # per request instead of building and finding two label sets. Bounded: methods are a
        # closed set, routes are the app's templates, and statuses are the ones the app sends.
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except ClientDisconnect:
            # The client went away mid-request (an aborted upload): its doing, not a server error.
            status = CLIENT_CLOSED
            raise
        finally:
            route = scope.get("route")
            # the route template, not the raw path: task ids must not explode label cardinality
            name = getattr(route, "path", "unmatched")
            method = scope["method"] if scope["method"] in _METHODS else "other"  # clients choose methods
            key = (method, name, status)
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = (child(HTTP_REQUESTS, method, name, str(status)),
                                              child(HTTP_LATENCY, name))
            series[0].inc()
            series[1].observe(time.perf_counter() - start)
            if status >= 500:
                GRADE_WINDOW.add_fault(f"http_{status}", f"{method} {name}")


class BodyLimitMiddleware:
    """Refuse bodies over the limit with 413 before they are buffered whole. ``path_limits``
    gives some paths (the batch routes) a larger limit, by the canonical path (see
    app/api/routing.py, which runs first). Only ``large_bodies`` requests with a body over
    ``max_bytes`` are served at once per process (later ones wait), so memory stays bounded by
    that many of the largest limit however many such requests arrive together.

    A body must arrive whole within ``grace_seconds`` plus its length (Content-Length, else the
    limit) at ``min_bytes_per_second``, else 408: a client that stops half-way does not hold the
    buffered part, nor a large-body slot, for longer than that. Time spent waiting for a slot is
    not counted against the client. A client holding a slot must also keep sending: a wait of
    more than ``grace_seconds`` for its next bytes is a 408 at once (else two clients that send
    just past ``max_bytes`` of a 100 MB announcement and stall keep every large body waiting for
    minutes)."""

    def __init__(self, app: Any, max_bytes: int, path_limits: dict[str, int] | None = None,
                 large_bodies: int = 2, grace_seconds: float = 15.0,
                 min_bytes_per_second: int = 512 * 1024) -> None:
        self.app, self.max_bytes, self.path_limits = app, max_bytes, path_limits or {}
        self._large = asyncio.Semaphore(large_bodies)
        self.grace_seconds, self.min_bytes_per_second = grace_seconds, min_bytes_per_second

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = self.path_limits.get(path, self.max_bytes)
        expected = limit
        for key, value in scope.get("headers", ()):
            if key == b"content-length" and value.isdigit():
                expected = int(value)
                if expected > limit:
                    await _too_large(send, limit)
                    return
        seen = 0
        holding = False
        deadline: float | None = None  # set when the app first asks for the body
        body_done = False
        allowance = self.grace_seconds + expected / self.min_bytes_per_second

        async def limited_receive() -> dict[str, Any]:
            nonlocal seen, holding, deadline, body_done
            if body_done:  # past the body: a wait for the client's disconnect, with no deadline
                return await receive()
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + allowance
            try:
                # a deadline on this task, not wait_for's task per message (a third of the
                # middleware's cost on a small request)
                until = min(deadline, loop.time() + self.grace_seconds) if holding else deadline
                async with asyncio.timeout_at(until):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, "the request body did not arrive in time") from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                seen += len(message.get("body", b""))
                if seen > limit:
                    # an HTTPException passes through FastAPI's body parsing to the error handler
                    raise HTTPException(413, f"the request body exceeds {limit} bytes")
                if seen > self.max_bytes and not holding:
                    waited_from = loop.time()
                    await self._large.acquire()
                    holding = True
                    deadline += loop.time() - waited_from  # the wait for a slot is ours, not the client's
            return message

        try:
            await self.app(scope, limited_receive, send)
        finally:
            if holding:
                self._large.release()


async def _too_large(send: Any, limit: int) -> None:
    body = b'{"error":"payload_too_large","detail":"the request body exceeds %d bytes"}' % limit
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

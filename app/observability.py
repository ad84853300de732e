"""Prometheus metrics, in a registry of our own so that several apps in one process (tests)
never collide, and a pure-ASGI middleware that times requests (cheaper than BaseHTTPMiddleware
on the grading hot path). Grade counts are not kept here: they go into the grade ledger
(app.grade_ledger), and /metrics reads its grade counter from there (app.jobs.queue_metrics)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from app.grade_ledger import count, ledger

REGISTRY = CollectorRegistry(auto_describe=True)

HTTP_REQUESTS = Counter(
    "scaling_grader_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=REGISTRY
)
HTTP_LATENCY = Histogram(
    "scaling_grader_http_request_seconds", "HTTP request latency", ["route"], registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
GRADE_LATENCY = Histogram(
    "scaling_grader_grade_seconds", "Time to grade one item", ["grading"], registry=REGISTRY,
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60),
)
TENANT_REQUESTS = Counter("scaling_grader_tenant_requests_total", "Requests per tenant", ["tenant"],
                          registry=REGISTRY)
READY = Gauge("scaling_grader_ready", "1 when /readyz passes", registry=REGISTRY,
              multiprocess_mode="mostrecent")  # with several API processes: the last readyz answered


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


def record_grade(split: str | None, grading: str, outcome: str, seconds: float, tenant: str | None = None) -> None:
    """One grade made in this process: counted once, into the grade ledger (app.grade_ledger), which
    the status page and /metrics' grade counter both read; its time, into a histogram here."""
    count(split or "inline", grading, outcome, tenant)
    child(GRADE_LATENCY, grading).observe(seconds)


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
                ledger().add_fault(f"http_{status}", f"{method} {name}", None, time.time())


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

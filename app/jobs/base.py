"""What every job backend offers the grading service."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from app.errors import ApiError
from app.graders.result import GradeResult

JobStatus = Literal["queued", "started", "finished", "failed"]


@dataclass(frozen=True, slots=True)
class JobView:
    job_id: str
    status: JobStatus
    result: GradeResult | None = None


def job_id_for(tenant: str, request_id: str | None) -> str:
    """Deterministic for an idempotency key, so concurrent retries agree on one job; random
    otherwise. Tenants are part of the key: two tenants may use the same request ids."""
    if request_id is None:
        return uuid.uuid4().hex
    return hashlib.sha256(f"{tenant}\0{request_id}".encode()).hexdigest()[:32]


async def poll_until(done: Callable[[], bool | Awaitable[bool]], wait: float) -> bool:
    """Wait up to `wait` seconds for done() to hold, checking often at first and then every
    100 ms: no thread is parked per waiting request, so thousands of clients may wait at once."""
    deadline = time.monotonic() + wait
    delay = 0.005
    while True:
        outcome = done()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.1)


def too_many_in_flight(cap: int, asked: int = 1) -> Exception:
    """The 429 of a tenant's in-flight cap (a batch asking for more than the cap can never pass:
    its detail says so)."""
    why = f"at most {cap} queued gradings in flight for this tenant"
    if asked > cap:
        why += f"; this request queues {asked}: split it"
    return ApiError(429, "too_many_in_flight", why, {"Retry-After": "1"})


def body_digest(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class QueuedGrading:
    """One grading handed to a backend. The backend never looks inside: an in-process backend
    calls ``run``; a backend with remote workers sends ``payload()`` (JSON-safe) to its job
    function."""

    queue: str  # the queue of its kind (app/graders/kinds.py)
    run: Callable[[], GradeResult]
    payload: Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ClaimResult:
    job_id: str
    new: bool  # False: this request id was seen before; the earlier job stands


class JobBackend(Protocol):
    name: str

    async def claim(self, tenant: str, request_id: str | None, digest: str) -> ClaimResult:
        """Reserve the job id for a request; raises ApiError 409 if the id was used for another body."""
        ...

    async def enqueue(self, tenant: str, job_id: str, work: QueuedGrading, max_in_flight: int | None = None) -> None:
        """Queue grading work under a claimed job id; 429 past the tenant's in-flight cap."""
        ...

    async def reserve(self, tenant: str, job_ids: Sequence[str], max_in_flight: int) -> None:
        """Count every one of ``job_ids`` against the tenant's cap, or none (429, and the claims
        are forgotten); reserved ids are then enqueued without a cap."""
        ...

    async def release(self, tenant: str, job_id: str) -> None:
        """Forget a claim whose work was never queued."""
        ...

    async def store(self, tenant: str, job_id: str, result: GradeResult) -> None:
        """Keep an inline result under its job id (idempotent requests)."""
        ...

    async def view(self, tenant: str, job_id: str, wait: float) -> JobView | None:
        """The job as the tenant sees it, after waiting up to `wait` seconds for it to finish;
        None if there is no such job for this tenant."""
        ...

    async def ready(self) -> tuple[bool, str]:
        ...

    async def close(self) -> None:
        ...

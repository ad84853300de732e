"""Jobs in threads of the API process: the embedded default, with the same semantics as Redis
(idempotent request ids, bounded waits, results kept for a TTL). Records are bounded in time
(result_ttl), in number per tenant (max_kept_jobs, the tenant's own oldest finished first) and in
bytes (results are kept as compressed JSON; max_kept_bytes_per_tenant, then max_kept_bytes in all,
taken from the tenant holding the most), so a client sending fresh idempotency keys forever cannot
grow the process, nor push another tenant's records out by count."""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from app.errors import ApiError
from app.graders.result import GradeResult, Outcome
from app.jobs.base import ClaimResult, JobView, QueuedGrading, job_id_for, poll_until, too_many_in_flight
from app.jobs.refusals import count_refusal
from app.settings import Settings

# Records looked at per claim when expiring: enough to free what one claim adds many times over.
_EXPIRE_SCAN = 256
_T = TypeVar("_T")


def _first(records: dict[str, _T]) -> Iterator[tuple[str, _T]]:
    # A bounded look at the front: unfinished records there (running jobs) are skipped, and
    # there are at most as many of them as jobs can run or wait at once.
    for n, item in enumerate(records.items()):
        if n >= _EXPIRE_SCAN:
            return
        yield item


def _pack(result: GradeResult) -> bytes:
    return zlib.compress(result.model_dump_json().encode(), 1)


def _unpack(packed: bytes) -> GradeResult:
    return GradeResult.model_validate_json(zlib.decompress(packed))


@dataclass
class _Job:
    job_id: str
    tenant: str
    digest: str
    created: float = field(default_factory=time.monotonic)
    future: Future | None = None
    reserved: bool = False  # counted against the tenant's in-flight cap before it is submitted
    packed: bytes | None = None  # the result, as zlib-compressed JSON: its stored size is counted
    done: threading.Event = field(default_factory=threading.Event)


class EmbeddedJobs:
    name = "embedded"
    async_redis = None  # no Redis: rate limits use in-process buckets

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._pool = ThreadPoolExecutor(settings.queue.embedded_threads, thread_name_prefix="grade")
        self._jobs: dict[str, _Job] = {}  # every record, in creation order
        self._of_tenant: dict[str, OrderedDict[str, None]] = {}  # each tenant's, in creation order
        self._bytes: dict[str, int] = {}  # stored result bytes per tenant
        self._total_bytes = 0
        self._lock = threading.Lock()

    def _drop(self, job_id: str) -> None:
        job = self._jobs.pop(job_id)
        self._of_tenant[job.tenant].pop(job_id, None)
        if job.packed is not None:
            self._bytes[job.tenant] -= len(job.packed)
            self._total_bytes -= len(job.packed)

    def _expire(self, tenant: str) -> None:
        """Drop finished records past their TTL (anyone's), then ``tenant``'s own oldest finished
        ones past its count and byte bounds, then, past the total byte bound, the oldest finished
        ones of whichever tenant stores the most. Every walk is in creation order and stops at the
        first record it keeps: the work per claim is what it frees, not the size of the store."""
        queue = self.settings.queue
        horizon = time.monotonic() - queue.result_ttl
        for job_id, job in list(_first(self._jobs)):
            if job.created >= horizon:
                break
            if job.done.is_set():
                self._drop(job_id)
        self._trim(tenant, queue.max_kept_jobs, queue.max_kept_bytes_per_tenant)
        if self._total_bytes > queue.max_kept_bytes and self._bytes:
            largest = max(self._bytes, key=self._bytes.__getitem__)
            self._trim(largest, queue.max_kept_jobs, max(self._bytes[largest] - (
                self._total_bytes - queue.max_kept_bytes), 0))

    def _trim(self, tenant: str, max_count: int, max_bytes: int) -> None:
        mine = self._of_tenant.get(tenant)
        if not mine:
            return
        excess = len(mine) - max_count
        for job_id, _ in list(_first(mine)):
            if excess <= 0 and self._bytes.get(tenant, 0) <= max_bytes:
                break
            if self._jobs[job_id].done.is_set():
                self._drop(job_id)
                excess -= 1

    def _keep(self, job: _Job, packed: bytes) -> None:
        with self._lock:
            job.packed = packed
            if self._jobs.get(job.job_id) is job:
                self._bytes[job.tenant] = self._bytes.get(job.tenant, 0) + len(packed)
                self._total_bytes += len(packed)
            job.done.set()

    def _busy(self, tenant: str) -> int:
        return sum(1 for j in self._jobs.values()
                   if j.tenant == tenant and (j.reserved or j.future is not None) and not j.done.is_set())

    async def claim(self, tenant: str, request_id: str | None, digest: str) -> ClaimResult:
        job_id = job_id_for(tenant, request_id)
        with self._lock:
            self._expire(tenant)
            existing = self._jobs.get(job_id)
            if existing is not None:
                if existing.digest != digest:
                    raise ApiError(409, "request_id_reused", "this request_id was used for a different request")
                return ClaimResult(job_id, new=False)
            self._jobs[job_id] = _Job(job_id, tenant, digest)
            self._of_tenant.setdefault(tenant, OrderedDict())[job_id] = None
        return ClaimResult(job_id, new=True)

    def _run(self, job: _Job, work: QueuedGrading) -> None:
        try:
            result = work.run()
        except BaseException:  # a crashed grading is an unscored error, never a lost job
            self._keep(job, _pack(GradeResult(grading="unknown", outcome=Outcome.error, reward=0.0,
                                              explanation="grading failed; it was not scored")))
            raise
        self._keep(job, _pack(result))

    async def enqueue(self, tenant: str, job_id: str, work: QueuedGrading, max_in_flight: int | None = None) -> None:
        job = self._jobs[job_id]
        if max_in_flight is not None:
            await self.reserve(tenant, [job_id], max_in_flight)
        job.future = self._pool.submit(self._run, job, work)

    async def reserve(self, tenant: str, job_ids: Sequence[str], max_in_flight: int) -> None:
        """Count all of ``job_ids`` against the cap at once, or none of them (429): a batch is
        queued whole or refused whole. A refused claim is forgotten, so a retry is new."""
        with self._lock:
            refused = self._busy(tenant) + len(job_ids) > max_in_flight
            for job_id in job_ids:
                if refused:
                    if job_id in self._jobs:
                        self._drop(job_id)
                else:
                    self._jobs[job_id].reserved = True
        if refused:
            await count_refusal(None, "too_many_in_flight")
            raise too_many_in_flight(max_in_flight, len(job_ids))

    async def release(self, tenant: str, job_id: str) -> None:
        """Forget a claim whose work was never queued."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and job.tenant == tenant and job.future is None:
                self._drop(job_id)

    async def store(self, tenant: str, job_id: str, result: GradeResult) -> None:
        job = self._jobs[job_id]
        # a large result (rows evidence) is hundreds of kilobytes: packed off the loop
        self._keep(job, await asyncio.to_thread(_pack, result))

    async def view(self, tenant: str, job_id: str, wait: float) -> JobView | None:
        job = self._jobs.get(job_id)
        if job is None or job.tenant != tenant:
            return None
        if not job.done.is_set() and wait > 0:
            await poll_until(job.done.is_set, wait)
        if job.done.is_set() and job.packed is not None:
            result = await asyncio.to_thread(_unpack, job.packed)
            result.job_id = job_id
            return JobView(job_id, "finished", result)
        running = job.future is not None and job.future.running()
        return JobView(job_id, "started" if running else "queued")

    async def ready(self) -> tuple[bool, str]:
        return True, f"embedded: {self.settings.queue.embedded_threads} grading threads"

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

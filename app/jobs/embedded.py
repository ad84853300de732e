"""Jobs in threads of the API process: the embedded default, with the same semantics as Redis
(idempotent request ids, bounded waits, results kept for a TTL). Records are bounded in time
(result_ttl) and in number (max_kept_jobs, oldest finished first), so a client sending fresh
idempotency keys forever cannot grow the process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from app.errors import ApiError
from app.graders.result import GradeResult, Outcome
from app.jobs.base import ClaimResult, JobView, QueuedGrading, job_id_for, poll_until, too_many_in_flight
from app.jobs.refusals import count_refusal
from app.settings import Settings

# Records looked at per claim when expiring: enough to free what one claim adds many times over.
_EXPIRE_SCAN = 256


@dataclass
class _Job:
    tenant: str
    digest: str
    created: float = field(default_factory=time.monotonic)
    future: Future | None = None
    reserved: bool = False  # counted against the tenant's in-flight cap before it is submitted
    result: GradeResult | None = None
    done: threading.Event = field(default_factory=threading.Event)


class EmbeddedJobs:
    name = "embedded"
    async_redis = None  # no Redis: rate limits use in-process buckets

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._pool = ThreadPoolExecutor(settings.queue.embedded_threads, thread_name_prefix="grade")
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()

    def _expire(self) -> None:
        """Drop finished records past their TTL, then the oldest finished ones past the count
        bound. Records are in creation order, so both walks stop at the first one they keep:
        the work per claim is what it frees, not the size of the store."""
        horizon = time.monotonic() - self.settings.queue.result_ttl
        excess = len(self._jobs) - self.settings.queue.max_kept_jobs
        for job_id, job in list(self._oldest_first()):
            if job.created >= horizon and excess <= 0:
                break
            if job.done.is_set():
                del self._jobs[job_id]
                excess -= 1

    def _oldest_first(self) -> Iterator[tuple[str, _Job]]:
        # A bounded look at the front: unfinished records there (running jobs) are skipped, and
        # there are at most as many of them as jobs can run or wait at once.
        for n, item in enumerate(self._jobs.items()):
            if n >= _EXPIRE_SCAN:
                return
            yield item

    def _busy(self, tenant: str) -> int:
        return sum(1 for j in self._jobs.values()
                   if j.tenant == tenant and (j.reserved or j.future is not None) and not j.done.is_set())

    async def claim(self, tenant: str, request_id: str | None, digest: str) -> ClaimResult:
        job_id = job_id_for(tenant, request_id)
        with self._lock:
            self._expire()
            existing = self._jobs.get(job_id)
            if existing is not None:
                if existing.digest != digest:
                    raise ApiError(409, "request_id_reused", "this request_id was used for a different request")
                return ClaimResult(job_id, new=False)
            self._jobs[job_id] = _Job(tenant, digest)
        return ClaimResult(job_id, new=True)

    def _run(self, job: _Job, work: QueuedGrading) -> None:
        try:
            job.result = work.run()
        except BaseException:  # a crashed grading is an unscored error, never a lost job
            job.result = GradeResult(grading="unknown", outcome=Outcome.error, reward=0.0,
                                     explanation="grading failed; it was not scored")
            raise
        finally:
            job.done.set()

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
                    self._jobs.pop(job_id, None)
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
                del self._jobs[job_id]

    async def store(self, tenant: str, job_id: str, result: GradeResult) -> None:
        job = self._jobs[job_id]
        job.result = result
        job.done.set()

    async def view(self, tenant: str, job_id: str, wait: float) -> JobView | None:
        job = self._jobs.get(job_id)
        if job is None or job.tenant != tenant:
            return None
        if not job.done.is_set() and wait > 0:
            await poll_until(job.done.is_set, wait)
        if job.done.is_set() and job.result is not None:
            return JobView(job_id, "finished", job.result.model_copy(update={"job_id": job_id}))
        running = job.future is not None and job.future.running()
        return JobView(job_id, "started" if running else "queued")

    async def ready(self) -> tuple[bool, str]:
        return True, f"embedded: {self.settings.queue.embedded_threads} grading threads"

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

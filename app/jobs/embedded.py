"""Jobs in threads of the API process: the embedded default, with the same semantics as Redis
(idempotent request ids, bounded waits, results kept for a TTL)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from app.errors import ApiError
from app.graders.result import GradeResult, Outcome
from app.jobs.base import ClaimResult, JobView, QueuedGrading, job_id_for, poll_until
from app.jobs.refusals import count_refusal
from app.settings import Settings


@dataclass
class _Job:
    tenant: str
    digest: str
    created: float = field(default_factory=time.monotonic)
    future: Future | None = None
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
        horizon = time.monotonic() - self.settings.queue.result_ttl
        for job_id in [j for j, job in self._jobs.items() if job.created < horizon and job.done.is_set()]:
            del self._jobs[job_id]

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
            with self._lock:
                busy = sum(1 for j in self._jobs.values()
                           if j.tenant == tenant and j.future is not None and not j.done.is_set())
            if busy >= max_in_flight:
                del self._jobs[job_id]
                await count_refusal(None, "too_many_in_flight")
                why = f"at most {max_in_flight} queued gradings in flight for this tenant"
                raise ApiError(429, "too_many_in_flight", why, {"Retry-After": "1"})
        job.future = self._pool.submit(self._run, job, work)

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

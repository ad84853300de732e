"""On a real Redis: a job's owner and idempotency digest share one record (``tenant\\ndigest``,
one SET NX per claim): a request id reused with another body is a 409, with the same body the same
job; a job is only its own tenant's to read; and records written before the two shared a key
(owner ``tenant`` alone, the digest in its own key) are still honoured."""

from __future__ import annotations

import asyncio

import pytest

from app.errors import ApiError
from app.graders.result import GradeResult, Outcome
from app.jobs import keys
from app.jobs.base import job_id_for
from app.jobs.redis_jobs import RedisJobs
from app.settings import Settings
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis server per test


def _result(job_id: str) -> GradeResult:
    return GradeResult(grading="numeric", outcome=Outcome.correct, reward=1.0, job_id=job_id, explanation="ok")


def test_one_record_claims_a_job_and_refuses_its_request_id_with_another_body(redis_server: RedisServer) -> None:
    async def run() -> None:
        jobs = RedisJobs(Settings(redis_url=redis_server.url), print)
        try:
            first = await jobs.claim("t", "r1", "digest-a")
            assert first.new
            connection = redis_server.client()
            assert connection.get(keys.owner(first.job_id)) == b"t\ndigest-a"
            assert not connection.exists(keys.idempotency("t", first.job_id))  # one record, not two
            with pytest.raises(ApiError) as reused:
                await jobs.claim("t", "r1", "digest-b")
            assert reused.value.status == 409
            await jobs.store("t", first.job_id, _result(first.job_id))
            again = await jobs.claim("t", "r1", "digest-a")  # a retry: the same job, not queued again
            assert again.job_id == first.job_id and not again.new
            assert 0 < connection.ttl(keys.owner(first.job_id)) <= jobs.settings.queue.result_ttl  # the result's TTL
            # another tenant's same request id is another job; neither reads the other's
            theirs = await jobs.claim("u", "r1", "digest-b")
            assert theirs.new and theirs.job_id != first.job_id
            assert await jobs.view("u", first.job_id, 0) is None
            assert await jobs.view("t", theirs.job_id, 0) is None
            mine = await jobs.view("t", first.job_id, 0)
            assert mine is not None and mine.status == "finished" and mine.result is not None
            # a job without a request id: its own record, no digest
            anonymous = await jobs.claim("t", None, "digest-c")
            assert anonymous.new and connection.get(keys.owner(anonymous.job_id)) == b"t\n"
            assert await jobs.view("u", anonymous.job_id, 0) is None
        finally:
            await jobs.close()

    asyncio.run(run())


def test_records_written_before_owner_and_digest_shared_a_key_are_honoured(redis_server: RedisServer) -> None:
    async def run() -> None:
        jobs = RedisJobs(Settings(redis_url=redis_server.url), print)
        connection = redis_server.client()
        job_id = job_id_for("t", "legacy")
        connection.set(keys.owner(job_id), "t", ex=600)
        connection.set(keys.idempotency("t", job_id), "digest-a", ex=600)
        try:
            with pytest.raises(ApiError) as reused:
                await jobs.claim("t", "legacy", "digest-b")
            assert reused.value.status == 409
            await jobs.store("t", job_id, _result(job_id))
            assert not (await jobs.claim("t", "legacy", "digest-a")).new
            seen = await jobs.view("t", job_id, 0)
            assert seen is not None and seen.status == "finished"
            assert await jobs.view("u", job_id, 0) is None
        finally:
            await jobs.close()

    asyncio.run(run())

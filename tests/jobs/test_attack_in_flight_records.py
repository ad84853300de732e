"""Attack (reviewer, session 39) on the in-flight cap's prune at the cap (app/jobs/redis_jobs.py
``_RESERVE``), whose first fix kept every entry past the horizon whose RQ record said ``queued`` or
``started``. The record's status is not the job's state: a record can say ``queued`` with the job
in no queue, or ``started`` with no execution anywhere, and then nothing (RQ's maintenance, the
API's view, the prune) ever changes it -- the entry was kept, refreshed once per horizon, for ever.
Fixed for ``started`` (kept only with an execution in the queue's StartedJobRegistry); a record
that says ``queued`` is still trusted (reading the queue to check was too costly: see
test_attack_in_flight_cost.py), so the lost push stays a known limit, kept as an expected failure.
Real Redis."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from app.jobs import keys
from app.jobs.redis_jobs import RedisJobs
from app.settings import Settings
from tests.jobs.test_attack_in_flight_ttl import TENANT, _queued, _refused
from tests.jobs.test_attack_in_flight_ttl import _settings as _settings_of
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis server per test


def _settings(server: RedisServer) -> Settings:
    return _settings_of(server, job_timeout=1)  # entries past the horizon after 1 s


def _rq_maintenance(connection) -> None:
    """RQ's own clean-up of the impl queue, as a lane's maintenance pass runs it
    (worker.grading_worker.clean_registries): the StartedJobRegistry's abandoned jobs and the
    intermediate queue, twice (the intermediate queue acts at its second look), with a minute
    between them made to have passed."""
    queue = Queue("impl", connection=connection, serializer=JSONSerializer)
    worker = SimpleWorker([queue], connection=connection, serializer=JSONSerializer)
    for _ in range(2):
        queue.started_job_registry.cleanup(time.time() + 3600)
        queue.intermediate_queue.cleanup(worker, queue)
        for job_id in queue.intermediate_queue.get_job_ids():
            connection.set(queue.intermediate_queue.get_first_seen_key(job_id), time.time() - 120)


def _aof_commands(server: RedisServer) -> tuple[Path, list[bytes]]:
    """The server's incremental AOF file and its commands (RESP arrays, raw)."""
    incr = sorted((server.dir / "appendonlydir").glob("*.incr.aof"))[-1]
    raw = incr.read_bytes()
    commands, at = [], 0
    while at < len(raw):
        start = at
        assert raw[at:at + 1] == b"*", raw[at:at + 40]
        end = raw.index(b"\r\n", at)
        count = int(raw[at + 1:end])
        at = end + 2
        for _ in range(count):
            end = raw.index(b"\r\n", at)
            length = int(raw[at + 1:end])
            at = end + 2 + length + 2
        commands.append(raw[start:at])
    return incr, commands


@pytest.mark.xfail(strict=True, reason="ATTACK SUCCEEDS (known limit, docs/limits.md): a job whose record came "
                   "back from a Redis crash without its place in the queue holds its tenant's slot")
def test_a_job_whose_push_redis_lost_holds_its_tenants_slot_for_ever(redis_server: RedisServer) -> None:
    """The lean enqueue (app.jobs.rq_enqueue) writes the job's record (status ``queued``) and then
    pushes its id, in a pipeline without MULTI. Redis runs with ``appendfsync everysec``
    (docker-compose.yml): a crash loses up to a second of writes, in order, so a restart can keep
    the record and lose the push. The job is then in no queue, no registry, and no lane will ever
    take it; RQ's maintenance looks only at its registries and intermediate queues, and the API's
    view reports it ``queued``. Its in-flight entry used to go at the horizon; now it is kept,
    refreshed at every look: with a cap of 1 the tenant is refused for ever.

    Reproduction (real AOF cut): cap 1, job_timeout 1 s, retries 0; queue one job; stop Redis; cut
    the AOF's last command (the RPUSH); restart; wait past the horizon; run RQ's maintenance; reserve."""
    connection = redis_server.client()

    async def queue_one() -> str:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            return await _queued(jobs, "a", 1)
        finally:
            await jobs.close()

    job_id = asyncio.run(queue_one())
    assert connection.lrange("rq:queue:impl", 0, -1) == [job_id.encode()]
    redis_server.stop()
    incr, commands = _aof_commands(redis_server)
    assert b"RPUSH" in commands[-1].upper() and job_id.encode() in commands[-1], commands[-1]
    incr.write_bytes(b"".join(commands[:-1]))  # the last second's tail lost: the push
    redis_server.start()
    connection = redis_server.client()
    assert connection.hget(f"rq:job:{job_id}", "status") == b"queued"
    assert connection.llen("rq:queue:impl") == 0 and connection.zcard(keys.in_flight(TENANT)) == 1

    async def run() -> None:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            for _ in range(3):  # three horizons, RQ's maintenance run in each
                await asyncio.sleep(1.2)
                _rq_maintenance(connection)
                if not await _refused(jobs, ["b"], 1):
                    return
            assert connection.hget(f"rq:job:{job_id}", "status") == b"queued"  # nothing changed it
            view = await jobs.view(TENANT, job_id, 0)
            pytest.fail(f"a job no queue holds (the API says {view.status if view else None!r}) keeps the "
                        "tenant's only slot past every horizon: refused for ever")
        finally:
            await jobs.close()

    asyncio.run(run())


def test_a_started_record_without_an_execution_holds_its_tenants_slot_for_ever(redis_server: RedisServer) -> None:
    """A job's record says ``started`` but no StartedJobRegistry entry holds an execution of it
    (the registry lost, a lane's entry removed by an operator's ``rq`` clean-up, a restore of an
    older snapshot of one key): RQ's abandoned-job handling reads only the registry, so it never
    fails or re-queues the job, and the record (no TTL: the service enqueues without ``ttl``)
    says ``started`` for ever. The entry is kept and refreshed at every look: the slot is lost.

    Reproduction: cap 1, job_timeout 1 s; queue one job; set its record as a lane's start writes
    it (status ``started``) without the registry entry; wait past the horizon; RQ's maintenance;
    reserve."""
    connection = redis_server.client()

    async def run() -> None:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            job_id = await _queued(jobs, "a", 1)
            connection.lrem("rq:queue:impl", 0, job_id)  # a lane popped it ...
            connection.hset(f"rq:job:{job_id}", mapping={"status": "started", "worker_name": "lane-gone"})
            for _ in range(3):
                await asyncio.sleep(1.2)
                _rq_maintenance(connection)
                if not await _refused(jobs, ["b"], 1):
                    return
            assert connection.hget(f"rq:job:{job_id}", "status") == b"started"
            pytest.fail("a 'started' record with no execution keeps the tenant's only slot past every horizon")
        finally:
            await jobs.close()

    asyncio.run(run())


def test_a_job_running_past_the_horizon_keeps_its_slot(redis_server: RedisServer) -> None:
    """The other side: a job whose execution is in its queue's StartedJobRegistry (a lane runs it)
    holds its slot past the horizon, as one waiting in its queue does."""
    connection = redis_server.client()

    async def run() -> None:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            job_id = await _queued(jobs, "a", 1)
            connection.lrem("rq:queue:impl", 0, job_id)  # a lane popped it and started it
            connection.hset(f"rq:job:{job_id}", mapping={"status": "started", "worker_name": "lane"})
            connection.zadd("rq:wip:impl", {f"{job_id}:execution-1": time.time() + 60})
            await asyncio.sleep(1.2)
            assert await _refused(jobs, ["b"], 1), "a running job older than the horizon lost its slot"
            connection.zrem("rq:wip:impl", f"{job_id}:execution-1")  # the execution gone, never ended
            await asyncio.sleep(1.2)
            assert not await _refused(jobs, ["b"], 1)
        finally:
            await jobs.close()

    asyncio.run(run())

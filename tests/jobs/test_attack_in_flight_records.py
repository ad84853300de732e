"""Attack (reviewer, session 39) on the in-flight cap's prune at the cap (app/jobs/redis_jobs.py
``_RESERVE``), whose first fix kept every entry past the horizon whose RQ record said ``queued`` or
``started``. The record's status is not the job's state: a record can say ``queued`` with the job
in no queue, or ``started`` with no execution anywhere, and then nothing (RQ's maintenance, the
API's view, the prune) ever changes it -- the entry was kept, refreshed once per horizon, for ever.
Fixed: ``started`` is kept only with an execution in the queue's StartedJobRegistry; a record that
says ``queued`` is trusted (reading the queue to check was too costly: see
test_attack_in_flight_cost.py) until WAITING_HORIZONS job deadlines after RQ queued the job. Real
Redis."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from rq import Queue
from rq.serializers import JSONSerializer

from app.jobs import keys
from app.jobs.redis_jobs import RedisJobs
from app.settings import Settings
from tests.jobs.test_attack_in_flight_ttl import TENANT, _queued, _refused
from tests.jobs.test_attack_in_flight_ttl import _settings as _settings_of
from tests.jobs.test_attack_lost_pop import _age_sighting
from tests.support.redis_server import RedisServer
from worker.dequeue import requeue_stranded

pytestmark = pytest.mark.slow  # a Redis server per test


def _settings(server: RedisServer) -> Settings:
    return _settings_of(server, job_timeout=1)  # entries past the horizon after 1 s


def _rq_maintenance(connection) -> None:
    """The clean-up of the impl queue a lane's maintenance pass runs
    (worker.grading_worker.clean_registries): RQ's of the StartedJobRegistry's abandoned jobs, and
    the intermediate list's (worker.dequeue.requeue_stranded), twice (that acts at its second
    look), with two minutes between them made to have passed."""
    queue = Queue("impl", connection=connection, serializer=JSONSerializer)
    for _ in range(2):
        queue.started_job_registry.cleanup(time.time() + 3600)
        requeue_stranded(queue)
        for job_id in queue.intermediate_queue.get_job_ids():  # its first sight made two passes old
            _age_sighting(connection, "impl", job_id, 120)


def _one_queued(redis_server: RedisServer) -> str:
    """A job of the tenant's queued under a cap of one (its API process closed): its id."""
    async def queue_one() -> str:
        jobs = RedisJobs(_settings(redis_server), print)
        try:
            return await _queued(jobs, "a", 1)
        finally:
            await jobs.close()

    return asyncio.run(queue_one())


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


def test_a_job_whose_push_redis_lost_gives_its_slot_back_at_the_waiting_cutoff(redis_server: RedisServer) -> None:
    """The lean enqueue (app.jobs.rq_enqueue) writes the job's record (status ``queued``) and then
    pushes its id, in a pipeline without MULTI. Redis runs with ``appendfsync everysec``
    (docker-compose.yml): a crash loses up to a second of writes, in order, so a restart can keep
    the record and lose the push. The job is then in no queue, no registry, and no lane will ever
    take it; RQ's maintenance looks only at its registries and intermediate queues, and the API's
    view reports it ``queued``. Its in-flight entry used to go at the horizon; the first fix kept
    it, refreshed at every look: with a cap of 1 the tenant was refused for ever. Now it is kept
    until the waiting cutoff, then the slot comes back.

    Reproduction (real AOF cut): cap 1, job_timeout 1 s, retries 0; queue one job; stop Redis; cut
    the AOF's last command (the RPUSH); restart; wait past the horizon; run RQ's maintenance; reserve."""
    connection = redis_server.client()

    job_id = _one_queued(redis_server)
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
            outcomes = []
            for _ in range(8):  # past the horizon (1 s), then past the waiting cutoff (4 s), RQ's maintenance between
                await asyncio.sleep(1.2)
                _rq_maintenance(connection)
                outcomes.append(await _refused(jobs, ["b"], 1))
                if not outcomes[-1]:
                    break
            assert connection.hget(f"rq:job:{job_id}", "status") == b"queued"  # nothing changed it
            # its record's word is taken for a while (a job that waits behind a backlog keeps its
            # slot), then the slot comes back: the tenant is not refused for ever
            assert outcomes[0] and not outcomes[-1], outcomes
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


def test_the_script_reads_the_time_rq_queued_a_job_as_rq_wrote_it(redis_server: RedisServer) -> None:
    """Contract with RQ's record: the script's reading of ``enqueued_at`` (days from the civil date,
    in Lua) is the time Python reads from what RQ wrote, to the second: a cutoff a second after it
    prunes the entry, a second before it keeps it."""
    from rq.utils import utcparse  # (an aware datetime, in UTC)

    from app.jobs.redis_jobs import _RESERVE, reserve_args

    connection = redis_server.client()

    job_id = _one_queued(redis_server)
    queued_at = utcparse(connection.hget(f"rq:job:{job_id}", "enqueued_at").decode()).timestamp()
    key = keys.in_flight(TENANT)
    verdicts = []
    for cutoff in (queued_at - 1, queued_at + 1, queued_at - 86_400 * 400):
        connection.zadd(key, {job_id: 0})  # past any horizon
        reserved = connection.eval(_RESERVE, *reserve_args(TENANT, [f"new-{cutoff}"], cap=1, clock=time.time(),
                                                           horizon=1, cutoff=cutoff, renew=False))
        verdicts.append(int(reserved))
        connection.delete(key)
    assert verdicts == [0, 1, 0], verdicts  # kept (refused), pruned (reserved), kept: a year back too
    # dates in January and February, a leap day, the last second of a day, as RQ writes them
    for stamp in ("2028-02-29T12:00:00.000000Z", "2027-01-01T00:00:00.000000Z", "2026-03-01T23:59:59.999999Z"):
        connection.hset(f"rq:job:{job_id}", "enqueued_at", stamp)
        at = int(utcparse(stamp).timestamp())
        verdicts = []
        for cutoff in (at, at + 1):
            connection.zadd(key, {job_id: 0})
            verdicts.append(int(connection.eval(_RESERVE, *reserve_args(TENANT, ["new"], cap=1, clock=time.time(),
                                                                        horizon=1, cutoff=cutoff, renew=False))))
            connection.delete(key)
        assert verdicts == [0, 1], (stamp, verdicts)

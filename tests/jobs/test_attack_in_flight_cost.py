"""Attacks (reviewer, session 39b) on the in-flight cap's prune at the cap (app/jobs/redis_jobs.py
``_RESERVE``), whose second version kept an entry past the horizon while its job was in its queue
list or had an execution in its queue's StartedJobRegistry, reading the queue whole to know. Real
Redis. Fixed: the queue is not read (the job's record says whether it waits); these stay as the
checks that it is not, and that a popped job keeps its slot.

* Cost: the queue list read whole is every tenant's waiting jobs (tenants x cap, 50,000 for 50
  tenants at the documented default of 1,024), copied into a Lua table inside one script, which
  blocked Redis about 20 ms on a refusal of one tenant, for one stale entry of its own; and a
  tenant's entries cross the horizon one at a time, so a tenant at the cap that keeps asking paid
  the whole read once per entry per horizon (about 14 s of Redis per tenant per horizon).
* A job in RQ's intermediate queue (popped by a lane that died before registering its start)
  looked gone for as long as it stayed there (until RQ's maintenance acts, within two or three
  minutes): its stale entry was pruned, RQ then re-queued it, and the tenant ran cap + 1."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from rq.utils import now as utc_now
from rq.utils import utcformat

from app.errors import ApiError
from app.jobs import keys
from app.jobs.redis_jobs import _RESERVE, RedisJobs, reserve_args
from app.settings import Settings
from tests.jobs.test_attack_in_flight_records import _rq_maintenance
from tests.jobs.test_attack_in_flight_ttl import TENANT, _queued
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis server per test

CAP = 1024  # the documented default (docs/queue-and-tenants.md)
OTHERS = 50_000  # the other tenants' waiting jobs: about 50 tenants at their cap


def _backlog(connection, others: int, mine: list[str]) -> None:
    """The impl queue: ``others`` jobs of other tenants, then this tenant's, each with its record."""
    pipe = connection.pipeline(transaction=False)
    other_ids = [uuid.uuid4().hex for _ in range(others)]
    for i in range(0, others, 1000):
        pipe.rpush("rq:queue:impl", *other_ids[i:i + 1000])
    pipe.rpush("rq:queue:impl", *mine)
    queued_at = utcformat(utc_now())  # as RQ writes it
    for job_id in mine:
        pipe.hset(f"rq:job:{job_id}", mapping={"origin": "impl", "status": "queued", "enqueued_at": queued_at})
    pipe.execute()


def _script_usec(connection) -> int:
    stats = connection.info("commandstats")
    return sum(int(v["usec"]) for name, v in stats.items() if name in ("cmdstat_eval", "cmdstat_evalsha"))


def _script_calls(connection) -> dict[str, int]:
    """The commands run since the last reset, the scripts' own among them, but EVAL itself."""
    stats = connection.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {name: n for name, n in calls.items() if name not in ("eval", "evalsha", "config|resetstat")}


def _reserve(connection, horizon: float, now: float) -> int:
    return int(connection.eval(_RESERVE, *reserve_args(TENANT, [uuid.uuid4().hex], cap=CAP, clock=now, horizon=horizon,
                                                       cutoff=now - 4 * 2700, renew=False)))


def test_one_refusal_with_one_stale_entry_does_not_read_every_tenants_backlog(redis_server: RedisServer) -> None:
    """A tenant at its cap of 1,024, one entry past the horizon whose job still waits (a backlog
    older than job_timeout x (1 + retries)), behind 50,000 jobs of other tenants: one refusal of
    that tenant read the whole queue into a Lua table (about 19 ms of Redis blocked, 145 ms with
    200,000 queued; a refusal with no stale entry costs 0.2 ms). Now it reads the one job's record:
    told by the commands the script ran (Redis counts those of a script), not by time."""
    connection = redis_server.client()
    mine = [uuid.uuid4().hex for _ in range(CAP)]
    _backlog(connection, OTHERS, mine)
    now = time.time()
    connection.zadd(keys.in_flight(TENANT), {job_id: now for job_id in mine})
    connection.zadd(keys.in_flight(TENANT), {mine[0]: now - 10_000})  # one entry past the horizon
    connection.config_resetstat()
    assert _reserve(connection, now - 2700, now) == 0  # refused: every job of the tenant still waits
    blocked_ms = _script_usec(connection) / 1000
    calls = _script_calls(connection)
    print(f"one refusal, one stale entry, {OTHERS} other jobs queued: Redis blocked {blocked_ms:.1f} ms; {calls}")
    assert "lrange" not in calls and "lpos" not in calls, calls  # no queue is read
    assert calls.get("hmget") == 1, calls  # the one stale entry's record


def test_a_tenants_entries_crossing_the_horizon_one_by_one_cost_no_queue_read(
        redis_server: RedisServer) -> None:
    """A tenant whose 1,024 entries were reserved at different times (as any steady client's are)
    and that asks again whenever it is refused: each entry crosses the horizon on its own, and each
    crossing cost the refusal that meets it a read of the whole queue (the kept entry is given the
    present time, so the entries stay apart: the next horizon again): about 14 s of Redis blocked
    per tenant per horizon behind 50,000 queued jobs. Now each crossing reads one record."""
    connection = redis_server.client()
    mine = [uuid.uuid4().hex for _ in range(CAP)]
    _backlog(connection, OTHERS, mine)
    start = time.time()
    horizon_seconds = 2700.0
    # reserved one every horizon / cap seconds over the last horizon: the oldest about to cross
    connection.zadd(keys.in_flight(TENANT),
                    {job_id: start - horizon_seconds + i * horizon_seconds / CAP for i, job_id in enumerate(mine)})
    connection.config_resetstat()
    crossings = 32
    for i in range(crossings):
        now = start + (i + 0.5) * horizon_seconds / CAP  # the clock just past the next entry's horizon
        assert _reserve(connection, now - horizon_seconds, now) == 0
    stats = connection.info("commandstats")
    queue_reads = sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("lrange", "lpos"))
    blocked_s = _script_usec(connection) / 1e6
    per_horizon = blocked_s / crossings * CAP
    print(f"{crossings} crossings: {queue_reads} whole-queue reads, {blocked_s * 1000:.0f} ms of Redis; "
          f"a tenant at its cap costs {per_horizon:.1f} s of blocked Redis per horizon")
    assert queue_reads == 0  # (the second version read the 51,024 queued ids at each crossing)
    assert int(stats["cmdstat_hmget"]["calls"]) == crossings  # one record read a crossing


def test_a_job_in_the_intermediate_queue_keeps_its_slot(redis_server: RedisServer) -> None:
    """A lane pops the job (RQ's dequeue moves it to ``rq:queue:impl:intermediate``) and dies
    before registering its start (killed, OOM, a host lost). The job is in neither the queue
    list nor the StartedJobRegistry for as long as RQ's maintenance takes to act on the
    intermediate queue (the second whole pass that sees it: two or three minutes,
    worker/dequeue.py): not the milliseconds the script's comment allows for. An entry
    past the horizon (the job waited behind a backlog) is pruned then, and the tenant queues
    another; the maintenance then puts the popped job back (in the queue, at its front): two
    jobs in flight under a cap of one. Each lane death in that window adds one."""
    connection = redis_server.client()
    settings = Settings(redis_url=redis_server.url, queue={"job_timeout": 1, "retries": 1})

    async def run() -> None:
        jobs = RedisJobs(settings, print)
        try:
            first = await _queued(jobs, "a", 1)
            await asyncio.sleep(2.2)  # it waited past the horizon (1 s x (1 + 1)) behind a backlog
            # a lane's dequeue (LMOVE into the intermediate queue), then the lane dies
            assert connection.lmove("rq:queue:impl", "rq:queue:impl:intermediate", "LEFT", "RIGHT") == \
                first.encode()
            try:
                second = await _queued(jobs, "b", 1)
            except ApiError as exc:
                assert exc.status == 429
                return  # refused: the popped job kept its slot
            _rq_maintenance(connection)  # the lanes' clean-up of the intermediate list: back in the queue
            waiting = [job_id.decode() for job_id in connection.lrange("rq:queue:impl", 0, -1)]
            assert first in waiting and second in waiting, waiting
            pytest.fail(f"cap 1, and the tenant has 2 jobs queued ({waiting}): the popped job's slot was "
                        "freed while it sat in RQ's intermediate queue, and RQ re-queued it")
        finally:
            await jobs.close()

    asyncio.run(run())

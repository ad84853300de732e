"""Jobs on Redis through RQ: queues per grading kind, results under our own key with a TTL,
written once (app.jobs.leases), waited for by notification (app.jobs.result_notices), one owner
record per job (holding its idempotency digest) set with NX, and a per-tenant in-flight set. A
job re-run after its worker looked dead goes to the front of its queue (RQ's Retry with
enqueue_at_front). Redis failures become a 503 with a reason, never a lost request.

Two ways Redis can lose what a client was told, and what this module does about each:

* Redis dies between a request's claim (owner and idempotency records) and its enqueue, and
  comes back with the claim (AOF) but no job: the retry of the same request_id finds a claim
  that is not new, and a job with neither an RQ record nor a result. It re-queues it, once: the
  retry that takes a short ``requeue`` marker (SET NX) does, concurrent retries wait for it.
* Redis loses its data (no persistence, FLUSHALL, a fresh volume): the job ids this API process
  handed out are remembered (bounded, per process), so a job it accepted that Redis no longer
  knows answers 410 ``job_lost`` (resubmit; the same request_id re-runs it), not a 404 that says
  it never existed; a result a worker wrote after the loss is still served to its tenant."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import redis.asyncio as aioredis
import redis.exceptions as redis_errors
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from rq import Queue, Retry
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from app.errors import ApiError, QueueUnavailable
from app.graders.result import GradeResult, Outcome
from app.jobs import keys
from app.jobs.base import ClaimResult, JobView, QueuedGrading, job_id_for, poll_until, too_many_in_flight
from app.jobs.leases import store_once
from app.jobs.refusals import count_refusal
from app.jobs.result_notices import ResultNotices
from app.jobs.rq_enqueue import LeanEnqueue
from app.redis_link import KEEPALIVE, REDIS_ERRORS, sync_connection
from app.settings import Settings

# Connections one API process opens to Redis at most. redis-py's default pool opens one for every
# command in flight and never closes them: a burst of concurrent requests (each a rate-limit
# check) left that many connections open for the process's life, one per request of the
# largest burst, up to Redis's own cap on clients, which every other replica and worker shares.
# Past this many, a command waits for a free connection (up to 5 s, then a connection error,
# which the rate limit rides out in memory). Redis answers one command at a time, so 64 in
# flight keep it as busy as more would; the results subscription holds one of them.
API_REDIS_CONNECTIONS = 64
# The same for the process's blocking client (RQ's enqueue, from threads): unbounded, it kept one
# connection per thread that ever enqueued at once (up to the thread pool's 40), beside the 64.
# An enqueue holds its connection for one pipeline's round trip.
API_SYNC_REDIS_CONNECTIONS = 8


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _owner_tenant(record: bytes | str) -> str:
    """The tenant of a job's owner record (``tenant\ndigest``, or ``tenant`` alone as written
    before the digest moved into it)."""
    return _text(record).partition("\n")[0]


# A job's owner and idempotency records are kept this long while it waits (the result's TTL
# starts when the result is written): a job that waits hours behind a backlog is still the
# client's when it runs. Seven days bounds what a claim whose job was never queued can leave.
QUEUED_RECORD_TTL = 7 * 24 * 3600
# A job whose record says it waits holds its in-flight slot for this many of a job's deadlines
# (job_timeout x (1 + retries), 45 min by default) after it was queued, not for ever (_RESERVE)
WAITING_HORIZONS = 4
# How many job ids one API process remembers having handed out (id -> tenant, ~200 bytes each),
# to tell a job Redis lost from one that never existed.
ISSUED_MEMORY = 100_000
# Waiters registered by enqueue that no wait took yet: the service waits right after it queues,
# so this bounds only what a caller that does not could leave.
EXPECTED_MEMORY = 10_000
# The waiter the current request registered as it queued its job (enqueue): a ticket into
# RedisJobs._expected, seen only by the same request (its asyncio task), so no other request of
# the id (the tenant's GET, a retry racing it) can take it.
_EXPECTING: contextvars.ContextVar[int | None] = contextvars.ContextVar("expecting", default=None)
# How long one retry holds the right to re-queue a claimed job that was never queued.
REQUEUE_HOLD_SECONDS = 60
_NOT_OWNED = object()  # view()'s first read: the job is not this tenant's (or Redis has no owner for it)


class IssuedJobs:
    """The job ids this process handed out, most recent last, oldest forgotten first."""

    def __init__(self, capacity: int = ISSUED_MEMORY) -> None:
        self.capacity = capacity
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, job_id: str, tenant: str) -> None:
        with self._lock:
            self._owners[job_id] = tenant
            self._owners.move_to_end(job_id)
            while len(self._owners) > self.capacity:
                self._owners.popitem(last=False)

    def owner(self, job_id: str) -> str | None:
        with self._lock:
            return self._owners.get(job_id)


def job_lost() -> ApiError:
    return ApiError(410, "job_lost", "this job was accepted but the queue no longer has it (Redis lost its "
                    "data, or its result expired); resubmit it (the same request_id runs it again)")

# KEYS[1] the tenant's in-flight set; ARGV horizon, cap, now, ttl, renew (1/0), RQ's key prefixes of a job
# and of a StartedJobRegistry, the waiting cutoff, job ids... -> 1 when every id is reserved, 0 (and none
# is) when they would pass the cap: a batch is queued whole or refused whole. Entries past the horizon
# are pruned only when they would decide a refusal: below the cap they change nothing, and the prune is
# a command per job. Past the horizon a job can no longer be running, but it may still be waiting (a
# backlog older than the horizon lost its slots before, and its tenant could queue past the cap). So an
# entry is kept while its job's record says it waits ("queued", and queued since the waiting cutoff,
# WAITING_HORIZONS horizons back) or it has an execution in its queue's StartedJobRegistry (one entry a
# lane: small), and a kept entry is given the present time, so that each is looked at once per horizon,
# not on every refusal while the backlog lasts. The queue itself is not read: it holds every tenant's
# backlog, and one refusal reading 50,000 ids blocked Redis 20 ms (a reviewer's measurement). So the
# record's word is taken, but not for ever: a record says "queued" for a job no lane will ever take
# (a push that a Redis crash lost, AOF's last second; a job a lane took and died before starting is in
# its queue's intermediate list, and the lanes' maintenance puts it back: worker.dequeue), and "started"
# for one whose execution was lost; their slots come back at the cutoff, or at once. RQ writes
# enqueued_at in UTC ("2026-12-05T02:50:06.123456Z", rewritten when it re-queues a job); epoch()
# turns it into seconds (days from the civil date: tests/jobs/test_attack_in_flight_records.py
# checks it against Python's reading of what RQ wrote). The set
# gets its TTL when it is made (the ttl bounds what a tenant that stops leaves behind; renewing it
# was a command per job), and again when ARGV[5] is 1: each API process asks for that on its first
# reservation for a tenant and then once per half ttl (RedisJobs._renew_due), so a set in use
# never expires under jobs still in flight (it did after seven days of a tenant that never
# emptied it: the count started again from zero, twice the cap held) and a set without a TTL
# gets one.
_RESERVE = """
local function epoch(stamp)
  local y, m, d, hh, mm, ss = string.match(stamp or '', '^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)')
  if not y then return nil end
  y, m = tonumber(y), tonumber(m)
  if m <= 2 then y, m = y - 1, m + 12 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * (m - 3) + 2) / 5) + tonumber(d) - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return (era * 146097 + doe - 719468) * 86400 + tonumber(hh) * 3600 + tonumber(mm) * 60 + tonumber(ss)
end
local asked = #ARGV - 8
local held = redis.call('ZCARD', KEYS[1])
if held + asked > tonumber(ARGV[2]) then
  local cutoff = tonumber(ARGV[8])
  local running = {}
  local function started(origin, id)
    if not running[origin] then
      running[origin] = {}
      for _, execution in ipairs(redis.call('ZRANGE', ARGV[7] .. origin, 0, -1)) do
        running[origin][string.match(execution, '^(.*):[^:]*$') or execution] = true
      end
    end
    return running[origin][id]
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])) do
    local record = redis.call('HMGET', ARGV[6] .. id, 'status', 'origin', 'enqueued_at')
    local waits = record[1] == 'queued' and (epoch(record[3]) or 0) >= cutoff
    if waits or (record[1] == 'started' and record[2] and started(record[2], id)) then
      redis.call('ZADD', KEYS[1], 'XX', ARGV[3], id)
    else
      held = held - redis.call('ZREM', KEYS[1], id)
    end
  end
  if held + asked > tonumber(ARGV[2]) then return 0 end
end
for i = 9, #ARGV do
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[i])
end
if held == 0 or ARGV[5] == '1' then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
return 1
"""


def reserve_args(tenant: str, job_ids: Sequence[str], *, cap: int, clock: float, horizon: float, cutoff: float,
                 renew: bool) -> list[Any]:
    """_RESERVE's key count, key and arguments, in its order (times in seconds of the epoch)."""
    return [1, keys.in_flight(tenant), horizon, cap, clock, QUEUED_RECORD_TTL, int(renew),
            Job.redis_job_namespace_prefix, StartedJobRegistry.key_template.format(""), cutoff, *job_ids]


class RedisJobs:
    """``job_function`` is the RQ job a worker runs on each payload: a module-level function that
    the workers can import by the same name (RQ records its module and name)."""

    name = "redis"

    def __init__(self, settings: Settings, job_function: Callable[[dict[str, Any]], Any]) -> None:
        assert settings.redis_url
        self.settings = settings
        self.job_function = job_function
        # A connection the pool kept across a Redis restart is dead; one retry on a new connection
        # (a connection error, not a timeout: a command that timed out may have run) spares the
        # client a 503 for the restart it already waited out.
        # TCP keepalive finds a connection whose peer went away without a word (a network cut)
        # in about 11 s, at no cost to Redis: the results subscription relies on it
        # (app.jobs.result_notices), as it waits on a read that never times out on its own.
        # The pool is bounded and waits for a free connection (see API_REDIS_CONNECTIONS);
        # otherwise as Redis.from_url builds it, the client closing its pool with itself.
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url, max_connections=API_REDIS_CONNECTIONS, timeout=5,
            socket_timeout=5, socket_connect_timeout=2,
            retry=AsyncRetry(ExponentialBackoff(cap=0.5, base=0.05), 2),
            retry_on_error=[redis_errors.ConnectionError],
            socket_keepalive=True, socket_keepalive_options=KEEPALIVE)
        self.async_redis = aioredis.Redis(connection_pool=pool)
        self.async_redis.auto_close_connection_pool = True
        self._sync = sync_connection(settings.redis_url, max_connections=API_SYNC_REDIS_CONNECTIONS)
        self._queues: dict[str, Queue] = {}
        self._lean = LeanEnqueue()
        # ticket -> (job id, tenant, waiter) of a job a request of this process is queueing,
        # registered for its result's announcement before the job is queued (enqueue), taken by
        # the same request's wait (view)
        self._expected: dict[int, tuple[str, str, Any]] = {}
        self._tickets = itertools.count()
        self.notices = ResultNotices(self.async_redis)
        self.issued = IssuedJobs()
        self._renewed: dict[str, float] = {}  # tenant -> when this process last renewed its set's TTL

    def _renew_due(self, tenant: str, now: float) -> bool:
        last = self._renewed.get(tenant)
        return last is None or now - last >= QUEUED_RECORD_TTL / 2

    def _queue(self, kind: str) -> Queue:
        if kind not in self._queues:
            self._queues[kind] = Queue(kind, connection=self._sync, serializer=JSONSerializer)
        return self._queues[kind]

    async def claim(self, tenant: str, request_id: str | None, digest: str) -> ClaimResult:
        """One record per job holds its owner and, for an idempotency key, the request's digest
        (``tenant\ndigest``; the job id is derived from both tenant and request id, so the record
        is the tenant's idempotency record too): one SET NX claims a new job."""
        job_id = job_id_for(tenant, request_id)
        record = f"{tenant}\n{digest if request_id is not None else ''}"
        try:
            taken = await self.async_redis.set(keys.owner(job_id), record, ex=QUEUED_RECORD_TTL, nx=True)
            self.issued.note(job_id, tenant)
            if taken or request_id is None:
                return ClaimResult(job_id, new=True)
            seen = await self.async_redis.get(keys.owner(job_id))
            if seen is not None:
                seen_tenant, _, seen_digest = _text(seen).partition("\n")
                if not seen_digest and seen_tenant == tenant:
                    # a claim written before owner and digest shared one record
                    legacy = await self.async_redis.get(keys.idempotency(tenant, job_id))
                    seen_digest = _text(legacy) if legacy is not None else digest
                if seen_tenant != tenant or seen_digest != digest:
                    raise ApiError(409, "request_id_reused", "this request_id was used for a different request")
            return ClaimResult(job_id, new=await self._never_queued(job_id))
        except REDIS_ERRORS:
            raise QueueUnavailable("Redis is unreachable") from None

    async def _never_queued(self, job_id: str) -> bool:
        """True for the one retry that should queue a claimed job that was never queued (Redis
        died between the claim and the enqueue): no RQ record, no result, and this call took the
        re-queue marker. A job whose RQ record expired after it ran has its result still (the
        same TTL), so it is not run again. A first request between its own claim and enqueue
        could race a retry here; RQ would then hold the id twice, and the job's lease lets only
        one attempt grade it (app.jobs.leases)."""
        if await self.async_redis.exists(keys.rq_job(job_id), keys.result(job_id)):
            return False
        return bool(await self.async_redis.set(keys.requeue(job_id), "1", ex=REQUEUE_HOLD_SECONDS, nx=True))

    async def enqueue(self, tenant: str, job_id: str, work: QueuedGrading, max_in_flight: int | None = None) -> None:
        """Queue the job. Its result's announcement is awaited from before it is queued (one read
        fewer for the request's wait that follows: view)."""
        payload = work.payload()
        try:
            if max_in_flight is not None:
                await self.reserve(tenant, [job_id], max_in_flight)
            self._unexpect(_EXPECTING.get())  # one this request queued and did not wait for
            if self.settings.queue.result_wait == "notify" and (waiter := await self.notices.expect(job_id)):
                ticket = next(self._tickets)
                self._expected[ticket] = (job_id, tenant, waiter)
                _EXPECTING.set(ticket)
                if len(self._expected) > EXPECTED_MEMORY:  # callers that queued without waiting
                    self._unexpect(next(iter(self._expected)))
            await anyio.to_thread.run_sync(lambda: self._enqueue(work.queue, job_id, payload, tenant))
        except BaseException as exc:
            self._unexpect(_EXPECTING.get())
            if not isinstance(exc, REDIS_ERRORS):
                raise
            # the claim must not outlive a job that was never queued, or a retry would wait forever
            await self._forget(tenant, job_id)
            raise QueueUnavailable("Redis is unreachable") from None

    def _unexpect(self, ticket: int | None) -> None:
        if ticket is None:
            return
        if _EXPECTING.get() == ticket:
            _EXPECTING.set(None)
        expected = self._expected.pop(ticket, None)
        if expected is not None:
            self.notices.forget(expected[0], expected[2])

    def _expected_by_this_request(self, tenant: str, job_id: str) -> Any:
        """The waiter this request registered as it queued ``job_id`` for ``tenant`` (None if it
        did not), taken: its wait forgets it when done."""
        ticket = _EXPECTING.get()
        expected = self._expected.get(ticket) if ticket is not None else None
        if expected is None or expected[:2] != (job_id, tenant):
            return None
        _EXPECTING.set(None)
        del self._expected[ticket]  # type: ignore[arg-type]
        return expected[2]

    def _enqueue(self, queue: str, job_id: str, payload: dict[str, Any], tenant: str) -> None:
        """RQ's enqueue in two commands (app.jobs.rq_enqueue: the job's record and the push). Not
        atomic: the job hash is written before its id is pushed, and a connection lost in
        between leaves a claim whose retry re-queues it (_never_queued)."""
        queue_settings = self.settings.queue
        self._lean.enqueue(
            self._queue(queue), func=self.job_function, args=(payload,), job_id=job_id,
            timeout=queue_settings.job_timeout,
            # result_ttl=0: RQ keeps no copy of the return value (the result is stored once under
            # the service's own key, app.jobs.leases) and drops the job's records when it succeeds
            # (app.jobs.rq_bookkeeping); a failed job keeps them, for view() to read
            result_ttl=0, failure_ttl=queue_settings.result_ttl,
            # no interval: a delayed retry would need an RQ scheduler; re-queue at once instead
            retry=Retry(max=queue_settings.retries, enqueue_at_front=True) if queue_settings.retries else None,
            meta={"tenant": tenant})

    async def reserve(self, tenant: str, job_ids: Sequence[str], max_in_flight: int) -> None:
        if not job_ids:
            return
        # entries older than a job's deadline belong to jobs that can no longer be running (they may
        # still be waiting: the script asks RQ's job record and registry)
        clock = time.time()
        deadline = self.settings.queue.job_timeout * (1 + self.settings.queue.retries)
        now = time.monotonic()
        renew = self._renew_due(tenant, now)
        try:
            reserved = await self.async_redis.eval(
                _RESERVE, *reserve_args(tenant, job_ids, cap=max_in_flight, clock=clock, horizon=clock - deadline,
                                        cutoff=clock - WAITING_HORIZONS * deadline, renew=renew))
            if renew and int(reserved):
                self._renewed[tenant] = now
        except REDIS_ERRORS:
            for job_id in job_ids:
                await self._forget(tenant, job_id)
            raise QueueUnavailable("Redis is unreachable") from None
        if not int(reserved):
            for job_id in job_ids:
                await self._forget(tenant, job_id)
            await count_refusal(self.async_redis, "too_many_in_flight")
            raise too_many_in_flight(max_in_flight, len(job_ids))

    async def release(self, tenant: str, job_id: str) -> None:
        await self._forget(tenant, job_id)
        with contextlib.suppress(*REDIS_ERRORS):
            await self.async_redis.zrem(keys.in_flight(tenant), job_id)

    async def _forget(self, tenant: str, job_id: str) -> None:
        with contextlib.suppress(*REDIS_ERRORS):
            await self.async_redis.delete(keys.idempotency(tenant, job_id), keys.owner(job_id))

    async def store(self, tenant: str, job_id: str, result: GradeResult) -> None:
        # on failure the caller still has its result; only a later retry of the same id re-grades
        with contextlib.suppress(*REDIS_ERRORS):
            await store_once(self.async_redis, tenant, job_id, result.model_dump_json(), self.settings.queue.result_ttl)

    async def _stored(self, job_id: str) -> bytes | None:
        raw = await self.async_redis.get(keys.result(job_id))
        return raw if raw is None else bytes(raw if isinstance(raw, bytes) else raw.encode())

    async def _wait_for_result(self, job_id: str, wait: float, first: Callable[[], Any], expected: Any = None) -> Any:
        """The stored result once there is one (None after `wait` seconds), or whatever not None
        ``first`` (the first read) returns. ``expected``: the waiter enqueue registered (no first
        read: result_notices)."""
        if self.settings.queue.result_wait == "notify":
            return await self.notices.wait_for(job_id, lambda: self._stored(job_id), wait, first=first,
                                               expected=expected)
        found: dict[str, Any] = {}
        reads = [first]

        async def finished() -> bool:
            raw = await reads.pop()() if reads else await self._stored(job_id)
            if raw is not None:
                found["raw"] = raw
            return raw is not None

        return found["raw"] if await poll_until(finished, wait) else None

    async def view(self, tenant: str, job_id: str, wait: float) -> JobView | None:
        owners: list[Any] = []

        async def owned_result() -> Any:
            # the owner and the result in one command (MGET), the result's first read
            owner, raw = await self.async_redis.mget(keys.owner(job_id), keys.result(job_id))
            owners.append(owner)
            if owner is None or _owner_tenant(owner) != tenant:
                return _NOT_OWNED
            return raw if raw is None else bytes(raw if isinstance(raw, bytes) else raw.encode())

        # the wait of the request that queued the job (this process, this tenant): its owner is
        # known and its result announced to a waiter registered before it was queued
        waiter = self._expected_by_this_request(tenant, job_id)
        try:
            raw = await self._wait_for_result(job_id, wait, owned_result, waiter)
            if raw is _NOT_OWNED:
                if owners[0] is None and self.issued.owner(job_id) == tenant:
                    return await self._lost(job_id)
                return None
            if raw is not None:
                return self._finished(job_id, raw)
            status = await self.async_redis.hget(keys.rq_job(job_id), "status")
            state = _text(status) if status else "queued"
            if state in ("failed", "stopped", "canceled"):
                # RQ gave up on it: an unscored error, unless a worker's result was written first.
                failed = GradeResult(grading="unknown", outcome=Outcome.error, reward=0.0, job_id=job_id,
                                     explanation="grading failed on every attempt; it was not scored")
                if await store_once(self.async_redis, tenant, job_id, failed.model_dump_json(),
                                    self.settings.queue.result_ttl):
                    return JobView(job_id, "failed", failed)
                raw = await self._stored(job_id)
                return self._finished(job_id, raw) if raw is not None else JobView(job_id, "failed", failed)
        except REDIS_ERRORS:
            raise QueueUnavailable("Redis is unreachable") from None
        return JobView(job_id, "started" if state == "started" else "queued")

    async def _lost(self, job_id: str) -> JobView:
        """A job this process accepted for the tenant whose records Redis no longer has: its result
        if a worker wrote one after the loss, else 410 (not the 404 of a job that never existed)."""
        raw = await self._stored(job_id)
        if raw is None:
            raise job_lost()
        return self._finished(job_id, raw)

    @staticmethod
    def _finished(job_id: str, raw: bytes) -> JobView:
        result = GradeResult.model_validate_json(raw)
        return JobView(job_id, "finished", result.model_copy(update={"job_id": job_id}))

    async def ready(self) -> tuple[bool, str]:
        try:
            # not PING: Redis answers it while still loading its AOF after a restart, when every
            # read of a job would fail; a read of a key is refused (LOADING) until the data is back
            await self.async_redis.exists(keys.MAINTENANCE)
        except REDIS_ERRORS as exc:
            return False, f"Redis is unreachable ({type(exc).__name__})"
        return True, "redis: connected"

    async def close(self) -> None:
        await self.notices.close()
        await self.async_redis.aclose()
        self._sync.close()

"""Who holds a job, and the one write of its result.

An attempt of a job takes the job's lease before grading: a key holding the attempt's token.
A lane's attempt (worker.grading_worker) uses as its token its execution's entry in the queue's
StartedJobRegistry (RQ's ``job_id:execution_id``), the entry the lane's heartbeat keeps ahead of
the clock and RQ's abandoned-job handling reads. So the lease needs no renewal of its own: it is
held while that entry is there, and a worker that is starved, stopped or cut off long enough lets
the entry lapse, RQ's cleanup re-queues the job and removes the entry, and the next attempt takes
the lease over. A beat is one command (the entry's ZADD), where a lease renewed
beside it took three more (a script comparing the token before its PEXPIRE). Any other token
(grade_job run by a worker without the heartbeat) is held until its key's TTL lapses, as before.
Taking and publishing are one Lua script each, so no check and write can interleave with another
worker's:

* ``take``: a job whose result exists is not graded again; a job whose lease another live
  attempt holds is not run beside it (the caller waits for that attempt's result or for its
  entry to lapse); otherwise the lease is ours and the attempt counted.
* ``publish``: the result is written once. Only while no result exists and no *other* live
  attempt holds the lease (the stale holder is fenced: it writes nothing while the new one
  runs); the write also frees the tenant's in-flight slot, announces the job on the results
  channel and counts the grade. Nothing is counted unless this call wrote the result.

Whether another holder is alive is looked up only when there is one (a re-run, or a job RQ holds
twice: app.jobs.redis_jobs): the first attempt of a job pays nothing for it.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.jobs import keys
from app.jobs.grade_log import TOTALS_KEY, GradeCount

# Whether the lease's holder (a token other than the caller's) still holds it: a token that names
# an execution of this job (ARGV[4] is the job id; RQ refuses a ':' in job ids) holds it while
# that execution's entry is in the StartedJobRegistry (KEYS[6] of publish, KEYS[4] of take: passed
# as `registry`); any other token while its key lives. The entry's score is not compared with a
# clock here: the lanes' look for abandoned jobs (RQ's cleanup, in Redis's time as each lane
# measures it: app.jobs.rq_bookkeeping) removes the entry as it re-queues the job, and that
# decides when a lane is dead. A comparison with Redis's TIME here made a live lane look dead
# wherever the workers' clocks lagged Redis's by more than the grace (and cost a TIME).
_ALIVE = """
local function alive(holder, registry)
  if string.sub(holder, 1, #ARGV[4] + 1) ~= ARGV[4] .. ':' then return true end
  return redis.call('ZSCORE', registry, holder) ~= false
end
"""
# KEYS: result, lease, attempts, registry. ARGV: token, lease ms, ttl s, job id, results channel.
# -> 0: a result exists; -1: another live attempt holds the lease; n >= 1: taken, this is attempt n.
# A result that exists is announced again: an attempt of a job whose result exists is a job RQ
# held twice (app.jobs.redis_jobs), and the request that queued it the second time waits for an
# announcement without reading first (app.jobs.result_notices.expect).
# (SET NX GET checks and takes the lease in one command; a dead holder's lease is taken over; the
# attempts counter is made with its TTL by one SET NX, the first attempt of every job, and counted
# on by INCR after that. A take repeated by the attempt that holds the lease, after a reply lost
# to a Redis error, is not counted again.)
_TAKE = _ALIVE + """
local written = redis.call('GET', KEYS[1])
if written then
  redis.call('PUBLISH', ARGV[5], ARGV[4] .. '\\n' .. written)
  return 0
end
local holder = redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2], 'NX', 'GET')
if holder and holder ~= ARGV[1] then
  if alive(holder, KEYS[4]) then return -1 end
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  holder = nil
end
if holder then return tonumber(redis.call('GET', KEYS[3])) or 1 end
if redis.call('SET', KEYS[3], '1', 'EX', ARGV[3], 'NX') then return 1 end
return redis.call('INCR', KEYS[3])
"""
# KEYS: lease. ARGV: token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: result, lease, in-flight set, owner record (which holds the idempotency digest too), grade
# totals, registry, grade buckets...
# ARGV: token, result JSON, ttl s, job id, channel, totals field, bucket ttl s, bucket fields...
# -> 1: written by this call; 0: a result existed; -1: another live attempt holds the lease. The
# job's owner record gets the result's TTL from here on (while the job waited it had a
# longer one: app.jobs.redis_jobs). The grade is counted here (app.jobs.grade_log), so it is
# counted exactly when its result is written; a bucket gets its TTL when it is made. The lease is
# left to lapse: every later attempt checks for the result first. (The result's existence is
# checked by its SET NX, and apart only when another live attempt holds the lease: the attempt
# that wrote the result may have left it, and then this one must not wait for it.)
_PUBLISH = _ALIVE + """
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] and alive(holder, KEYS[6]) then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  return -1
end
if not redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3], 'NX') then return 0 end
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('EXPIRE', KEYS[4], ARGV[3])
redis.call('PUBLISH', ARGV[5], ARGV[4] .. '\\n' .. ARGV[2])
redis.call('HINCRBY', KEYS[5], ARGV[6], 1)
for i = 7, #KEYS do
  if redis.call('HINCRBY', KEYS[i], ARGV[i + 1], 1) == 1 then redis.call('EXPIRE', KEYS[i], ARGV[7]) end
end
return 1
"""
# The API's own write (inline idempotent results, a job RQ gave up on): once, like a worker's.
# KEYS: result, in-flight set, owner record. ARGV: result JSON, ttl s, job id, channel.
_STORE = """
if redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX') then
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('EXPIRE', KEYS[3], ARGV[2])
  redis.call('PUBLISH', ARGV[4], ARGV[3] .. '\\n' .. ARGV[1])
  return 1
end
return 0
"""

_NO_REGISTRY = f"{keys.PREFIX}:no-registry"
TAKEN_ELSEWHERE = -1
RESULT_EXISTS = 0


def new_token(holder: str) -> str:
    return f"{holder}:{uuid.uuid4().hex[:12]}"


@dataclass
class Lease:
    """One attempt's hold on one job. ``registry`` is the key of the StartedJobRegistry whose
    entry ``token`` is (a lane's attempt), else None (then the lease is held for ``ttl_ms``).
    ``lost`` turns true when a beat finds that entry gone (worker.grading_worker)."""

    connection: Any
    job_id: str
    token: str
    ttl_ms: int
    registry: str | None = None
    taken: bool = field(default=False)
    lost: bool = field(default=False)

    def _registry_key(self) -> str:
        # None: a key that holds nothing (an attempt that knows no registry takes a lane's
        # execution for dead; the service's attempts all know theirs: worker.jobs)
        return self.registry or _NO_REGISTRY

    def take(self, result_ttl: int) -> int:
        outcome = int(self.connection.eval(_TAKE, 4, keys.result(self.job_id), keys.lease(self.job_id),
                                           keys.attempts(self.job_id), self._registry_key(), self.token,
                                           self.ttl_ms, result_ttl, self.job_id, keys.RESULTS_CHANNEL))
        if outcome >= 1:
            self.taken, self.lost = True, False
        return outcome

    def release(self) -> None:
        self.connection.eval(_RELEASE, 1, keys.lease(self.job_id), self.token)

    def publish(self, result_json: str, tenant: str, result_ttl: int, count: GradeCount) -> int:
        """Write the result once and count the grade with it (see _PUBLISH)."""
        buckets = [key for key, _ in count.buckets]
        fields = [field for _, field in count.buckets]
        return int(self.connection.eval(_PUBLISH, 6 + len(buckets), keys.result(self.job_id), keys.lease(self.job_id),
                                        keys.in_flight(tenant), keys.owner(self.job_id), TOTALS_KEY,
                                        self._registry_key(), *buckets,
                                        self.token, result_json, result_ttl, self.job_id, keys.RESULTS_CHANNEL,
                                        count.total_field, count.bucket_ttl, *fields))


async def store_once(redis: Any, tenant: str, job_id: str, result_json: str, result_ttl: int) -> bool:
    """The API's write of a result (async client): True if it wrote it, False if one existed."""
    return bool(await redis.eval(_STORE, 3, keys.result(job_id), keys.in_flight(tenant), keys.owner(job_id),
                                 result_json, result_ttl, job_id, keys.RESULTS_CHANNEL))


_current = threading.local()


def hold(lease: Lease | None) -> None:
    """Set (None: clear) the lease of the job this thread runs: the worker sets it before the job
    function runs, and its heartbeat thread renews the same object."""
    _current.lease = lease


def held() -> Lease | None:
    return getattr(_current, "lease", None)

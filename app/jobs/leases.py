"""Who holds a job, and the one write of its result.

An attempt of a job takes the job's lease (a token of its own, with the heartbeat's TTL) before
grading, and its worker renews it with every heartbeat. A worker that is starved, stopped or cut
off long enough loses the lease; the job is then re-queued (RQ's abandoned-job handling) and the
next attempt takes the lease. Each step is one Lua script, so no check and write can interleave
with another worker's:

* ``take``: a job whose result exists is not graded again; a job whose lease another attempt
  holds is not run beside it (the caller waits for that attempt's result or for its lease to
  lapse); otherwise the lease is ours and the attempt counted.
* ``publish``: the result is written once. Only while no result exists and no *other* attempt
  holds the lease (the stale holder is fenced: it writes nothing while the new one runs); the
  write also frees the tenant's in-flight slot, announces the job on the results channel and
  counts the grade. Nothing is counted unless this call wrote the result.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.jobs import keys
from app.jobs.grade_log import TOTALS_KEY, GradeCount

# KEYS: result, lease, attempts. ARGV: token, lease ms, ttl s.
# -> 0: a result exists; -1: another attempt holds the lease; n >= 1: taken, this is attempt n.
# (SET NX GET checks and takes the lease in one command; the attempts counter is made with its
# TTL by one SET NX, the first attempt of every job, and counted on by INCR after that. A take
# repeated by the attempt that holds the lease, after a reply lost to a Redis error, is not
# counted again.)
_TAKE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local holder = redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2], 'NX', 'GET')
if holder and holder ~= ARGV[1] then return -1 end
if holder then return tonumber(redis.call('GET', KEYS[3])) or 1 end
if redis.call('SET', KEYS[3], '1', 'EX', ARGV[3], 'NX') then return 1 end
return redis.call('INCR', KEYS[3])
"""
# KEYS: lease. ARGV: token, lease ms. -> 1: renewed; 0: lost (lapsed, or another attempt's now).
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# KEYS: lease. ARGV: token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: result, lease, in-flight set, owner record (which holds the idempotency digest too), grade
# totals, grade buckets...
# ARGV: token, result JSON, ttl s, job id, channel, totals field, bucket ttl s, bucket fields...
# -> 1: written by this call; 0: a result existed; -1: another attempt holds the lease. The job's
# owner record gets the result's TTL from here on (while the job waited it had a
# longer one: app.jobs.redis_jobs). The grade is counted here (app.jobs.grade_log), so it is
# counted exactly when its result is written; a bucket gets its TTL when it is made. The lease is
# left to lapse: every later attempt checks for the result first. (The result's existence is
# checked by its SET NX, and apart only when another attempt holds the lease: the attempt that
# wrote the result may have left it, and then this one must not wait for it to lapse.)
_PUBLISH = """
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  return -1
end
if not redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3], 'NX') then return 0 end
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('EXPIRE', KEYS[4], ARGV[3])
redis.call('PUBLISH', ARGV[5], ARGV[4] .. '\\n' .. ARGV[2])
redis.call('HINCRBY', KEYS[5], ARGV[6], 1)
for i = 6, #KEYS do
  if redis.call('HINCRBY', KEYS[i], ARGV[i + 2], 1) == 1 then redis.call('EXPIRE', KEYS[i], ARGV[7]) end
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

TAKEN_ELSEWHERE = -1
RESULT_EXISTS = 0


def new_token(holder: str) -> str:
    return f"{holder}:{uuid.uuid4().hex[:12]}"


@dataclass
class Lease:
    """One attempt's hold on one job. ``lost`` turns true when a renewal finds the lease gone."""

    connection: Any
    job_id: str
    token: str
    ttl_ms: int
    taken: bool = field(default=False)
    lost: bool = field(default=False)

    def take(self, result_ttl: int) -> int:
        outcome = int(self.connection.eval(_TAKE, 3, keys.result(self.job_id), keys.lease(self.job_id),
                                           keys.attempts(self.job_id), self.token, self.ttl_ms, result_ttl))
        if outcome >= 1:
            self.taken, self.lost = True, False
        return outcome

    def renew_in(self, pipeline: Any) -> bool:
        """Queue the lease's renewal on ``pipeline`` (a heartbeat's one round trip), and say
        whether it was queued: not before the job function took the lease (nothing to renew), nor
        once it was lost. Its reply goes to ``renewed``."""
        if not self.taken or self.lost:
            return False
        pipeline.eval(_RENEW, 1, keys.lease(self.job_id), self.token, self.ttl_ms)
        return True

    def renewed(self, reply: Any) -> bool:
        """Take a renewal's reply: False (and ``lost``) if the lease had lapsed or was another's."""
        if not reply:
            self.lost = True
        return not self.lost

    def release(self) -> None:
        self.connection.eval(_RELEASE, 1, keys.lease(self.job_id), self.token)

    def publish(self, result_json: str, tenant: str, result_ttl: int, count: GradeCount) -> int:
        """Write the result once and count the grade with it (see _PUBLISH)."""
        buckets = [key for key, _ in count.buckets]
        fields = [field for _, field in count.buckets]
        return int(self.connection.eval(_PUBLISH, 5 + len(buckets), keys.result(self.job_id), keys.lease(self.job_id),
                                        keys.in_flight(tenant), keys.owner(self.job_id), TOTALS_KEY, *buckets,
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

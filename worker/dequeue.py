"""How a lane takes a job off its queues so that a job is never in no list at all.

RQ's own dequeue moves a job id atomically into the queue's intermediate list (``LMOVE`` /
``BLMOVE``) only for a worker of one queue. A worker of several queues pops it with ``BLPOP``,
and from the pop until the lane writes the job's start (prepare_execution) the id is in no
list and no registry: a lane killed in that moment, or one whose pop was answered while the
network between it and Redis was cut (Redis hands the id to a connection that will never read
it: any job queued in the first seconds of a cut went to an idle lane on the far side), took the
job with it, and it never ran. Every lane here takes its job with RQ's atomic move, whatever
its queues (LaneQueue), the lane removes the id from the intermediate list in the same round
trip as it writes the job's start (app.jobs.rq_bookkeeping), and the maintenance puts a job
left there back at the front of its queue (requeue_stranded).

Redis can block on several lists only with a pop (BLPOP, BLMPOP); a move blocks on one list. So
a lane of several queues looks in each in order (its priority, as RQ's) and, when all are
empty, waits on one: the queue it last took a job from (the first of its queues, until it has
taken one), so lanes settle on the queues their deployment's jobs come to. After each wait
that ends empty it looks once in its other queues before it waits again: a job queued where no
idle lane waits is taken within one wait (worker.grading_worker.IDLE_DEQUEUE_SECONDS, 5 s). An
idle lane of two queues costs two commands a wait (RQ's BLPOP was one); a lane of one queue, one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from rq import Queue
from rq.exceptions import DequeueTimeout, NoSuchJobError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job
from rq.utils import as_text

from app.redis_link import REDIS_ERRORS

log = logging.getLogger(__name__)

# How long after a maintenance pass first finds an id in an intermediate list it may put the job
# back (at a later pass: the maintenance looks once a minute: worker.grading_worker). A lane is
# between its take and its start for milliseconds; one stopped or frozen longer than this
# (SIGSTOP, a VM paused) starts the job after it went back, which the job's lease keeps from being
# graded twice (app.jobs.leases).
STRANDED_AFTER_SECONDS = 30

# KEYS: the intermediate list, the queue, the queue's StartedJobRegistry, the list's record of when
# a pass first saw each id in it. ARGV: STRANDED_AFTER_SECONDS, RQ's job key prefix, the record's
# TTL. -> how many jobs went back to the front of the queue. One script, so no lane's start (its
# LREM: app.jobs.rq_bookkeeping) and no other pass can interleave with a decision. Times are
# Redis's (TIME): lanes on hosts whose clocks disagree judge an id's age alike. A sighting holds the
# job's enqueued_at too (RQ rewrites it whenever it queues the job again), so the same id taken again
# after a re-queue is a new sighting. An id seen before
# and found again STRANDED_AFTER_SECONDS or more later is taken off the list, and put back at the
# front of its queue unless its job started (an execution in the registry: a start whose reply a
# cut lost), ended or is gone (status not "queued"), or already waits in the queue. Sightings of
# ids no longer in the list are forgotten (RQ's own first-seen keys outlive their id by a day: a
# job re-queued under the same id went back at the first sight of its next take, while a live lane
# started it; a reviewer's attack). The queue is read only for a job
# found stranded: a pass reads no backlog otherwise.
_REQUEUE = """
local now = tonumber(redis.call('TIME')[1])
local seen = {}
local sightings = redis.call('HGETALL', KEYS[4])
for i = 1, #sightings, 2 do
  local at, queued_at = string.match(sightings[i + 1], '^(%d+) ?(.*)$')
  seen[sightings[i]] = {at = tonumber(at), queued_at = queued_at}
end
local listed, moved, running = {}, 0, nil
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local record = redis.call('HMGET', ARGV[2] .. id, 'enqueued_at', 'status')
  local queued_at, status = record[1] or '', record[2]
  local first = seen[id]
  if listed[id] then
  elseif not first or first.queued_at ~= queued_at then
    redis.call('HSET', KEYS[4], id, now .. ' ' .. queued_at)
    listed[id] = true
  elseif now - first.at < tonumber(ARGV[1]) then
    listed[id] = true
  else
    redis.call('LREM', KEYS[1], 1, id)
    local started = false
    if status == 'queued' then
      running = running or redis.call('ZRANGE', KEYS[3], 0, -1)
      for _, member in ipairs(running) do
        if string.sub(member, 1, #id + 1) == id .. ':' then started = true end
      end
    end
    if status == 'queued' and not started and redis.call('LPOS', KEYS[2], id) == false then
      redis.call('LPUSH', KEYS[2], id)
      moved = moved + 1
    end
  end
end
for id, _ in pairs(seen) do
  if not listed[id] then redis.call('HDEL', KEYS[4], id) end
end
if next(listed) ~= nil then redis.call('EXPIRE', KEYS[4], ARGV[3]) end
return moved
"""


# a record of sightings outlives the passes that need it (a minute apart) and then lapses: a
# record left by a pass whose list was then emptied by the lanes' starts
_SIGHTINGS_TTL_SECONDS = 300


def intermediate_key(queue_key: str) -> str:
    """RQ's intermediate list of a queue (where a pop puts a job id until the job starts)."""
    return IntermediateQueue.get_intermediate_queue_key(queue_key)


class LaneQueue(Queue):
    """RQ's Queue, whose ``dequeue_any`` (the method RQ's worker loop calls on its queue class)
    always moves the id into the queue's intermediate list. State is per lane: each lane's worker
    gets a subclass of its own (``of_one_lane``)."""

    _waits_on: ClassVar[str | None] = None  # the queue key the lane last took a job from
    _waited_empty: ClassVar[bool] = False  # the last wait ended with nothing: look in the others
    # called as the lane, its queues found empty, is about to wait for a job (its worker's
    # _send_jobs_done: what it has kept for a quiet moment goes out before one)
    before_wait: ClassVar[Callable[[], None] | None] = None

    @classmethod
    def of_one_lane(cls) -> type[LaneQueue]:
        """A queue class of its own, for one lane's worker (its state is the lane's)."""
        return type(cls.__name__, (cls,), {"_waits_on": None, "_waited_empty": False, "before_wait": None})

    @classmethod
    def dequeue_any(cls, queues: Iterable[Queue], timeout: int | None, connection: Any,
                    job_class: type[Job] | None = None, serializer: Any = None,
                    death_penalty_class: Any = None) -> tuple[Job, Queue] | None:
        queue_keys = [queue.key for queue in queues]
        while True:
            taken = cls._take(connection, queue_keys, timeout)
            if taken is None:
                return None
            queue_key, job_id = taken
            queue = cls.from_queue_key(queue_key, connection=connection, job_class=job_class, serializer=serializer,
                                       death_penalty_class=death_penalty_class)
            try:
                job = (job_class or Job).fetch(job_id, connection=connection, serializer=serializer)
            except NoSuchJobError:
                pass  # a job deleted while it waited (as RQ's dequeue, silently): nothing to run
            except REDIS_ERRORS:
                raise  # the id stays in the list: the job goes back (requeue_stranded), not lost
            except Exception:
                # a record no lane can read (RQ's dequeue raises, and its loop ends the lane): left in
                # the list it would go back and end a lane again every pass, so it is dropped, as
                # RQ's pop dropped it, and logged; the lane takes the next job
                log.exception("job %s of queue %s: its record cannot be read; dropped", job_id, queue.name)
            else:
                return job, queue
            connection.lrem(intermediate_key(queue_key), 1, job_id)  # either way: off the list

    @classmethod
    def _take(cls, connection: Any, queue_keys: Sequence[str], timeout: int | None) -> tuple[str, str] | None:
        """(queue key, job id) moved into that queue's intermediate list; None when all are empty
        and ``timeout`` is None; DequeueTimeout when a wait of ``timeout`` seconds ended empty."""
        waits_on = cls._waits_on if cls._waits_on is not None and cls._waits_on in queue_keys else queue_keys[0]
        if timeout is None:
            looks = list(queue_keys)
        elif cls._waited_empty:
            looks = [key for key in queue_keys if key != waits_on]  # it has just waited on that one
        else:
            # in order; the queue it waits on is looked at by the wait itself when it is the last
            # (a lane of one queue: RQ's single BLMOVE)
            looks = list(queue_keys[:-1] if queue_keys[-1] == waits_on else queue_keys)
        for queue_key in looks:
            job_id = connection.lmove(queue_key, intermediate_key(queue_key))
            if job_id is not None:
                return cls._took(queue_key, job_id)
        if timeout is None:
            return None
        if cls.before_wait is not None:
            cls.before_wait()
        job_id = connection.blmove(waits_on, intermediate_key(waits_on), timeout)
        if job_id is None:
            cls._waited_empty = True
            raise DequeueTimeout(timeout, waits_on)
        return cls._took(waits_on, job_id)

    @classmethod
    def _took(cls, queue_key: str, job_id: bytes | str) -> tuple[str, str]:
        cls._waits_on, cls._waited_empty = queue_key, False
        return queue_key, as_text(job_id)


def sightings_key(queue_key: str) -> str:
    """When a maintenance pass first saw each id in a queue's intermediate list (a hash)."""
    return f"{intermediate_key(queue_key)}:seen"


def requeue_stranded(queue: Queue) -> int:
    """Put back at the front of ``queue`` each job left in its intermediate list (a lane took it
    and died, or lost the answer to a network cut, before the job's start was written), at a
    maintenance pass that finds it there STRANDED_AFTER_SECONDS or more after a pass first did:
    with the maintenance's look once a minute, one to two minutes after it was taken. Unlike RQ's
    clean-up of the list, which counts such a job as failed (a retry spent, or a failed job when
    none is left), a job that never started goes back as it was. One LLEN a pass when the list is empty
    (RQ's read it whole). Returns how many went back."""
    connection = queue.connection
    if not connection.llen(queue.intermediate_queue_key):
        return 0  # (sightings a pass left lapse with their record's TTL; a new take is a new sighting)
    return int(connection.eval(_REQUEUE, 4, queue.intermediate_queue_key, queue.key, queue.started_job_registry.key,
                               sightings_key(queue.key), STRANDED_AFTER_SECONDS, Job.redis_job_namespace_prefix,
                               _SIGHTINGS_TTL_SECONDS))

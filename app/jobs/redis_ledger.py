"""The API process's writer into the grade ledger of Redis mode (the keys: app.jobs.grade_log).

Inline grades are counted in memory first, then one script call at most every second writes them
all: no Redis round trip per grade. While Redis is away the counts wait in memory (bounded: totals
per label, buckets of the last five minutes, the last faults) and the write is retried; a write
whose answer was lost is not applied twice."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import redis

from app.grade_ledger import (
    KEEP_FAULTS,
    WINDOW_BUCKET_SECONDS,
    WINDOW_BUCKETS,
    GradeLedger,
    Labels,
    MemoryLedger,
    Window,
    bucket_start,
)
from app.jobs.grade_log import (
    FAULTS_KEY,
    TOTALS_KEY,
    WINDOW_SECONDS,
    GradeCount,
    faults,
    faults_key,
    grade_count,
    totals,
    window,
)
from app.jobs.keys import PREFIX
from app.redis_link import REDIS_ERRORS, sync_connection

log = logging.getLogger(__name__)


# KEYS: totals, this ledger's last written batch, bucket keys..., fault lists...
# ARGV: the batch (JSON), its number, the mark's ttl s.
# -> 1: counted; 0: this batch was counted before (its first write's answer was lost).
# A batch: {"totals": [[field, n]...], "buckets": [[[field, n]...] per bucket key], "bucket_ttl": s,
# "faults": [{"entries": [json...], "ttl": s or 0} per fault list], "keep": n}. A bucket gets its TTL
# when it is made, as in the workers' script.
_FLUSH = """
local done = redis.call('GET', KEYS[2])
if done and tonumber(done) >= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
local batch = cjson.decode(ARGV[1])
for _, pair in ipairs(batch.totals) do redis.call('HINCRBY', KEYS[1], pair[1], pair[2]) end
local k = 3
for _, fields in ipairs(batch.buckets) do
  for _, pair in ipairs(fields) do
    if redis.call('HINCRBY', KEYS[k], pair[1], pair[2]) == pair[2] then
      redis.call('EXPIRE', KEYS[k], batch.bucket_ttl)
    end
  end
  k = k + 1
end
for _, list in ipairs(batch.faults) do
  for _, entry in ipairs(list.entries) do redis.call('LPUSH', KEYS[k], entry) end
  redis.call('LTRIM', KEYS[k], 0, batch.keep - 1)
  if list.ttl > 0 then redis.call('EXPIRE', KEYS[k], list.ttl) end
  k = k + 1
end
return 1
"""
_MARK_TTL = 24 * 3600  # longer than any outage a batch waits through (it is rewritten on each write)
_LONGEST_PAUSE = 5.0


@dataclass(frozen=True)
class _Batch:
    number: int
    keys: list[str]
    batch: str
    grades: int


class RedisLedger:
    """The API process's writer into the deployment's ledger, and a reader of it.

    ``add`` costs a lock and a few dict updates: no Redis round trip per grade. A thread writes
    what gathered, one script call at most every ``interval`` seconds; a reader (the status page,
    a scrape) writes this process's pending counts first, so what it reads includes them. Other
    processes' counts appear within their own interval.

    While Redis is unreachable the counts wait and the write is retried (pauses doubling up to
    5 s), with a warning in the log; memory stays bounded: totals are one number per label set,
    buckets older than the window are dropped (no reader shows them), and each fault list keeps
    its last 20. Batches are numbered per ledger and the script skips one it already applied, so
    a retry after a lost answer does not count twice."""

    def __init__(self, connection: redis.Redis, interval: float = 1.0) -> None:
        self.connection, self.interval = connection, interval
        self._script = connection.register_script(_FLUSH)
        self._mark = f"{PREFIX}:grades:written:{uuid.uuid4().hex}"
        self._lock = threading.Lock()  # the pending counts
        self._writing = threading.Lock()  # one write at a time, in batch order
        self._totals: dict[str, int] = {}
        self._buckets: dict[str, tuple[int, dict[str, int]]] = {}  # key -> (start, field -> n)
        self._newest = 0
        self._fields: dict[tuple[Labels, str | None], GradeCount] = {}  # of the newest bucket
        self._faults: dict[str, deque[str]] = {}  # list key -> entries, oldest first
        self._pending = 0  # grades in _totals
        self._unsent: _Batch | None = None  # taken from pending, not yet known written
        self._numbered = 0
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    # -- writing

    def add(self, labels: Labels, tenant: str | None, now: float) -> None:
        start = bucket_start(now)
        with self._lock:
            if start > self._newest:
                self._newest = start
                self._drop_stale(start)
                self._fields.clear()
            # the fields of this bucket, made once per label set and tenant (on every grade)
            count = self._fields.get((labels, tenant)) if start == self._newest else None
            if count is None:
                count = grade_count(*labels, now=now, tenant=tenant)
                if start == self._newest:
                    self._fields[labels, tenant] = count
            self._totals[count.total_field] = self._totals.get(count.total_field, 0) + 1
            self._pending += 1
            for key, field in count.buckets:
                fields = self._buckets.setdefault(key, (start, {}))[1]
                fields[field] = fields.get(field, 0) + 1
        self._kick()

    def add_fault(self, kind: str, where: str, tenant: str | None, now: float) -> None:
        entry = json.dumps({"at": now, "kind": kind, "where": where})
        with self._lock:
            for who in (None, tenant) if tenant else (None,):
                self._faults.setdefault(faults_key(who), deque(maxlen=KEEP_FAULTS)).append(entry)
        self._kick()

    def _drop_stale(self, now: float) -> None:
        horizon = now - WINDOW_SECONDS
        for key in [key for key, (start, _) in self._buckets.items() if start <= horizon]:
            del self._buckets[key]

    def _kick(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stop.is_set():
                    self._thread = threading.Thread(target=self._run, name="grade-ledger", daemon=True)
                    self._thread.start()
        if not self._wake.is_set():  # set takes a lock and notifies; most grades find it set
            self._wake.set()

    def _run(self) -> None:
        pause = self.interval
        while True:
            self._wake.wait()
            if self._stop.wait(self.interval):  # a second's grades go in one write
                return
            self._wake.clear()  # before taking the counts: one added after this wakes the next round
            try:
                self.flush()
                pause = self.interval
            except (*REDIS_ERRORS, redis.RedisError) as exc:  # unreachable, or refusing writes (out of memory)
                self._wake.set()
                if not self._failing:
                    log.warning("grade counts not written to Redis (%s): kept in memory, retrying", type(exc).__name__)
                self._failing = True
                if self._stop.wait(pause):
                    return
                pause = min(pause * 2, _LONGEST_PAUSE)

    def _take(self) -> _Batch | None:
        """The pending counts as the next numbered batch, and pending emptied."""
        with self._lock:
            self._drop_stale(time.time())
            if not (self._totals or self._buckets or self._faults):
                return None
            bucket_keys = list(self._buckets)
            fault_keys = list(self._faults)
            batch = {
                "totals": [[field, n] for field, n in self._totals.items()],
                "buckets": [[[field, n] for field, n in self._buckets[key][1].items()] for key in bucket_keys],
                "bucket_ttl": WINDOW_BUCKET_SECONDS * (WINDOW_BUCKETS + 1),
                "faults": [
                    {"entries": list(self._faults[key]), "ttl": 0 if key == FAULTS_KEY else WINDOW_SECONDS}
                    for key in fault_keys
                ],
                "keep": KEEP_FAULTS,
            }
            grades = self._pending
            self._totals, self._buckets, self._faults, self._pending = {}, {}, {}, 0
        self._numbered += 1
        return _Batch(self._numbered, [TOTALS_KEY, self._mark, *bucket_keys, *fault_keys], json.dumps(batch), grades)

    def flush(self) -> None:
        """Write this process's pending counts (raises a Redis error if it cannot: they are kept
        and the next flush sends them again)."""
        with self._writing:
            for _ in range(2):  # what waited from a failed write, then what came since
                if self._unsent is None:
                    self._unsent = self._take()
                if self._unsent is None:
                    return
                self._script(keys=self._unsent.keys, args=[self._unsent.batch, self._unsent.number, _MARK_TTL])
                self._unsent = None
                if self._failing:
                    self._failing = False
                    log.warning("grade counts written to Redis again")

    def held(self) -> int:
        """Grades counted here and not yet known written to Redis."""
        with self._lock:
            return self._pending + (self._unsent.grades if self._unsent else 0)

    def close(self) -> None:
        """Stop the writing thread and write what is left; what cannot be written is said. (A
        grade counted after this starts the thread again.)"""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()  # under the lock: no grade starts a thread meanwhile
        if thread is not None:
            self._wake.set()
            thread.join(timeout=10)
        with self._lock:
            self._stop.clear()
        try:
            self.flush()
        except (*REDIS_ERRORS, redis.RedisError) as exc:
            log.error(
                "%d grade counts could not be written to Redis (%s) and are lost", self.held(), type(exc).__name__
            )

    # -- reading: the whole deployment's, this process's pending counts included

    def totals(self) -> dict[Labels, int]:
        self.flush()
        return totals(self.connection)

    def window(self, tenant: str | None, now: float) -> Window:
        self.flush()
        return window(self.connection, now, tenant)

    def faults(self, tenant: str | None) -> list[dict[str, Any]]:
        self.flush()
        return faults(self.connection, tenant)


def ledger_for(redis_url: str | None) -> GradeLedger:
    """Redis mode: the deployment's ledger in Redis; embedded mode: this process's memory."""
    return RedisLedger(sync_connection(redis_url)) if redis_url else MemoryLedger()

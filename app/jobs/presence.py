"""Live workers as the API sees them, one record per lane (a job a worker process runs at
once, see worker/lanes.py). Each lane publishes a small JSON record (its name, host,
queues and sandbox tier) with every RQ heartbeat, under a key whose TTL is a few heartbeats: a
worker that dies or loses Redis drops out of the listing within seconds, without any clean-up.
Worker names are also kept in one sorted set (scored by last beat), so listing never scans the
keyspace, however many results Redis holds. A name's place in that set is renewed every
LIST_EVERY_SECONDS, far inside the hour after which a silent name is forgotten, and at once when
its record was missing (a new lane, or a Redis that lost its data): a beat is one command, the
record's SET, which says whether the record was there."""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from app.jobs import keys

_PREFIX = f"{keys.PREFIX}:worker:"
NAMES = f"{keys.PREFIX}:workers"  # sorted set: worker name -> time of its last beat
_FORGET_AFTER_SECONDS = 3600  # names silent this long are dropped from the set
LIST_EVERY_SECONDS = 300


def key(worker_name: str) -> str:
    return _PREFIX + worker_name


def publish(connection: Any, worker_name: str, record_json: str, ttl: int) -> Any:
    """One beat: the record (connection may be a pipeline; then its reply, the record it
    replaced, comes with the pipeline's). None back: the record was missing, list the name."""
    return connection.set(key(worker_name), record_json, ex=ttl, get=True)


def list_name(connection: Any, worker_name: str) -> None:
    connection.zadd(NAMES, {worker_name: time.time()})


def withdraw(connection: Any, worker_name: str) -> None:
    connection.delete(key(worker_name))
    connection.zrem(NAMES, worker_name)


def record(worker_name: str, queues: tuple[str, ...], sandbox: dict[str, Any] | None, lane: int = 1,
           lanes: int = 1) -> str:
    """The JSON a worker lane publishes; sandbox is impl's sandbox_status (None without the impl
    queue). A worker process runs `lanes` jobs at once, each lane under a name of its own; lane 1
    bears the process's name."""
    return json.dumps({
        "name": worker_name,
        "lane": lane,
        "lanes": lanes,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "queues": list(queues),
        "sandbox_tier": sandbox.get("tier") if sandbox else None,
        "min_tier": sandbox.get("min_tier") if sandbox else None,
        "meets_min_tier": sandbox.get("meets_min_tier") if sandbox else None,
        # whether its cases run in an idle CPU group (SANDBOX__IDLE_CPU, and the host allowed it)
        "sandbox_idle_cpu": sandbox.get("idle_cpu") if sandbox else None,
        # the plain tier: whether Landlock confines its cases' files, and why not (None elsewhere)
        "sandbox_landlock": sandbox.get("landlock") if sandbox else None,
        "started_at": int(time.time()),
    })


def with_fields(record_json: str, fields: dict[str, Any]) -> str:
    """The record with fields that change from beat to beat: the heartbeat thread's worst
    lateness so far (how close a busy worker came to being taken for dead, against
    QUEUE__HEARTBEAT_GRACE) and the worker's health (app.jobs.worker_health)."""
    return json.dumps({**json.loads(record_json), **fields})


async def live_workers(redis: Any, limit: int = 1000) -> list[dict[str, Any]]:
    """Records of the workers whose presence key has not expired, sorted by name."""
    await redis.zremrangebyscore(NAMES, "-inf", time.time() - _FORGET_AFTER_SECONDS)
    names = await redis.zrevrange(NAMES, 0, limit - 1)
    if not names:
        return []
    workers = []
    for raw in await redis.mget([key(n.decode() if isinstance(n, bytes) else n) for n in names]):
        if raw is None:  # expired between the scan and the read
            continue
        try:
            workers.append(json.loads(raw))
        except ValueError:
            continue
    return sorted(workers, key=lambda w: str(w.get("name")))

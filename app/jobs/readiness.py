"""Is the deployment ready to grade impl? Only if at least one live worker serving the impl
queue can: its sandbox meets the minimum tier, its sandbox starts are not failing, and it is not
at its pid limit (each read from the worker's presence record, app.jobs.presence). Without such a
worker an impl job would only wait, or come back unscored."""

from __future__ import annotations

from typing import Any

from app.jobs.presence import live_workers

FAULT_STREAK = 3  # consecutive sandbox faults after which a worker counts as failing
PID_HEADROOM = 0.9  # a worker using this share of its pid limit counts as at the limit


def trouble(worker: dict[str, Any]) -> str | None:
    """Why this impl worker cannot be counted on, or None."""
    if worker.get("meets_min_tier") is False:
        return "sandbox below the minimum tier"
    if int(worker.get("sandbox_fault_streak") or 0) >= FAULT_STREAK:
        return "sandbox starts failing"
    pids = worker.get("pids")
    if pids and pids[1] and pids[0] >= PID_HEADROOM * pids[1]:
        return "near its pid limit"
    return None


async def impl_workers_ready(redis: Any) -> tuple[bool, str]:
    workers = [w for w in await live_workers(redis) if "impl" in (w.get("queues") or ())]
    able = [w for w in workers if trouble(w) is None]
    if not workers:
        return False, "no live impl worker: impl jobs would wait"
    return bool(able), f"{len(able)} of {len(workers)} live impl worker lanes can grade"

"""What a worker's heartbeat says about its own health, beyond being alive: whether its sandbox
starts are failing (the last impl grades all ended in a sandbox fault) and how close it is to its
control group's pid limit. The API's readiness (app.jobs.readiness) reads both from the presence
record, so a worker that can only fail is not counted as one that can grade."""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_fault_streak = 0  # consecutive impl grades of this process that ended in a sandbox fault


def note_impl_outcome(outcome: str) -> None:
    global _fault_streak
    with _lock:
        _fault_streak = _fault_streak + 1 if outcome == "sandbox_error" else 0


def fields(pids: tuple[int, int] | None = None) -> dict[str, Any]:
    """The heartbeat's health fields; ``pids`` is (tasks in use, limit) of the worker's tightest
    pid limit, as the sandbox reads it (app.sandbox.health.pid_usage), or None without one."""
    return {"sandbox_fault_streak": _fault_streak,
            "pids": list(pids) if pids is not None else None}

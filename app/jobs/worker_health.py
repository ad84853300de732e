"""What a worker's heartbeat says about its own health, beyond being alive: whether its sandbox
starts are failing (the last impl grades all ended in a sandbox fault) and how close it is to its
control group's pid limit. The API's readiness (app.jobs.readiness) reads both from the presence
record, so a worker that can only fail is not counted as one that can grade."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_fault_streak = 0  # consecutive impl grades of this process that ended in a sandbox fault


def note_impl_outcome(outcome: str) -> None:
    global _fault_streak
    with _lock:
        _fault_streak = _fault_streak + 1 if outcome == "sandbox_error" else 0


def _own_cgroup() -> Path | None:
    """The unified (v2) control group of this process, as mounted in its namespace."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].lstrip("/")
    except OSError:
        pass
    return None


def pid_usage() -> tuple[int, int] | None:
    """(pids in use, the limit) of the nearest control group that sets one; None without one."""
    group = _own_cgroup()
    while group is not None and group != Path("/sys/fs/cgroup").parent:
        try:
            limit = (group / "pids.max").read_text().strip()
            if limit != "max":
                return int((group / "pids.current").read_text()), int(limit)
        except (OSError, ValueError):
            pass
        if group == Path("/sys/fs/cgroup"):
            break
        group = group.parent
    return None


def fields() -> dict[str, Any]:
    usage = pid_usage()
    return {"sandbox_fault_streak": _fault_streak,
            "pids": list(usage) if usage is not None else None}

"""Whether this process can still run cases: the facts a worker publishes with its heartbeat and
that its container's health check reads.

A worker that cannot start sandboxes any more (runsc or bubblewrap failing, the pid limit of its
container reached) still takes jobs and answers every one ``sandbox_error``: right answers
unscored, for as long as the worker lives. So the sandbox counts its starts here, and the worker
is unhealthy while starts keep failing or while its tasks come near the pid limit that makes
them fail.

``sandbox_health()`` is the in-process answer. A process given a health file
(``SandboxSettings.health_file``) also writes its start record there whenever it changes, so a
check run from outside the process (the container's HEALTHCHECK, ``python -m
app.sandbox.health``) reaches the same verdict without starting anything itself."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.cpus import CGROUP_ROOT, own_cgroups

# Starts failing in a row before the sandbox counts as broken (one may fail to bad luck: the
# pool retries once per case), and how long a failure streak stays news without a new start.
FAILED_STARTS_UNHEALTHY = 3
FAILURE_MEMORY_SECONDS = 300.0
# Tasks of the pid limit in use beyond which the next starts would fail (each gVisor sandbox
# holds about 130 host threads: a few sandboxes short of the limit is already too near).
PIDS_UNHEALTHY_FRACTION = 0.9


@dataclass
class StartRecord:
    """Sandbox starts of one process: the current streak of failures and the last reason."""

    pid: int
    started: int = 0
    failed: int = 0
    failing_in_a_row: int = 0
    last_failure: str | None = None
    last_failure_at: float | None = None  # wall-clock time, comparable across processes

    def failing(self, now: float) -> bool:
        return (self.failing_in_a_row >= FAILED_STARTS_UNHEALTHY and self.last_failure_at is not None
                and now - self.last_failure_at < FAILURE_MEMORY_SECONDS)


_lock = threading.Lock()
_record = StartRecord(pid=os.getpid())
_health_file: Path | None = None


def use_health_file(path: Path | None) -> None:
    """Write this process's start record to path (None: keep it in memory only)."""
    global _health_file
    with _lock:
        _health_file = path
        _write_locked()


def record_start(ok: bool, reason: str | None = None) -> None:
    """A sandbox child started (ok) or failed to (reason: the fault, never candidate output)."""
    with _lock:
        # Written when the verdict may change: every failure, the first start, the end of a streak.
        changed = not ok or _record.failing_in_a_row > 0 or _record.started == 0
        if ok:
            _record.started += 1
            _record.failing_in_a_row = 0
        else:
            _record.failed += 1
            _record.failing_in_a_row += 1
            _record.last_failure = (reason or "unknown")[:300]
            _record.last_failure_at = time.time()
        if changed:
            _write_locked()


def _write_locked() -> None:
    if _health_file is None:
        return
    _record.pid = os.getpid()
    tmp = _health_file.with_name(f".{_health_file.name}.{os.getpid()}")
    with contextlib.suppress(OSError):  # a full or read-only /run must not fail a case
        tmp.write_text(json.dumps(asdict(_record)))
        os.replace(tmp, _health_file)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def pid_usage(root: Path = CGROUP_ROOT) -> tuple[int, int] | None:
    """(tasks in use, task limit) of the tightest pids limit on this process's group and its
    ancestors that this process can see; None without a limit. In a container the mount shows
    the container's own group (cgroup namespace, or v1 bind-mounted at the group), whose limit
    is the container's pids_limit."""
    own = own_cgroups()
    candidates: list[Path] = []
    for base, group in ((root / "pids", own.get("pids")), (root, own.get(""))):
        if group is None:
            continue
        directory = base / group.lstrip("/")
        if not directory.is_dir():  # the mount is the container's group itself
            directory = base
        while True:
            candidates.append(directory)
            if directory in (base, directory.parent):
                break
            directory = directory.parent
    tightest: tuple[int, int] | None = None
    for d in candidates:
        limit, used = _read_int(d / "pids.max"), _read_int(d / "pids.current")
        if limit is None or used is None:
            continue
        if tightest is None or limit - used < tightest[1] - tightest[0]:
            tightest = (used, limit)
    return tightest


def zombies(proc: Path = Path("/proc")) -> int:
    """Processes in this pid namespace that exited and were never reaped (each holds a pid)."""
    count = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                count += 1
    return count


def _verdict(record: StartRecord, pids: tuple[int, int] | None, now: float) -> dict[str, Any]:
    reasons = []
    if record.failing(now):
        reasons.append(f"{record.failing_in_a_row} sandbox starts failed in a row: {record.last_failure}")
    if pids is not None and pids[0] >= PIDS_UNHEALTHY_FRACTION * pids[1]:
        reasons.append(f"{pids[0]} of {pids[1]} tasks of the pid limit in use")
    return {
        "ok": not reasons,
        "reason": "; ".join(reasons) or None,
        "sandbox_starts": record.started,
        "sandbox_start_failures": record.failed,
        "failing_in_a_row": record.failing_in_a_row,
        "pids": pids[0] if pids else None,
        "pids_max": pids[1] if pids else None,
        "zombies": zombies(),
    }


def sandbox_health() -> dict[str, Any]:
    """This process's sandbox health: ``ok`` False (with ``reason``) when sandbox starts keep
    failing or the tasks in use near the pid limit; counts for the heartbeat and metrics."""
    with _lock:
        record = StartRecord(**asdict(_record))
    return _verdict(record, pid_usage(), time.time())


def health_from_file(path: Path) -> dict[str, Any]:
    """The verdict from a process's health file, for a check outside that process. A file
    missing or unreadable counts as no start yet (a worker that has not started a case), not as
    failing: the pid facts still count."""
    record = StartRecord(pid=0)
    with contextlib.suppress(OSError, ValueError, TypeError):
        record = StartRecord(**json.loads(path.read_text()))
    return _verdict(record, pid_usage(), time.time())


def main(argv: list[str]) -> int:
    """``python -m app.sandbox.health FILE``: exit 0 when healthy, 1 with the reason otherwise.
    It starts no process and waits on nothing, so a health check built on it cannot hang or
    leave an orphan behind."""
    if len(argv) != 1:
        print("usage: python -m app.sandbox.health HEALTH_FILE", file=sys.stderr)
        return 2
    verdict = health_from_file(Path(argv[0]))
    print(json.dumps(verdict))
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

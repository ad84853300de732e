"""How long a process and everything it started have waited for a CPU that others held, for
waits that must not count a starved start as a failed one (tests/support/server.py)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from app.cpus import schedstat

PROC = Path("/proc")
Task = tuple[int, int]  # (pid, thread id)


def _descendants(pid: int) -> list[int]:
    """pid and every live process below it (the kernel's per-thread children lists)."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in (PROC / str(current) / "task").iterdir():
                with contextlib.suppress(OSError):
                    stack.extend(int(child) for child in (task / "children").read_text().split())
    return found


def _schedstats(pid: int) -> dict[Task, tuple[int, int]]:
    """(nanoseconds run, nanoseconds waited runnable for a CPU) of each thread of pid: the
    process's own schedstat is its main thread's alone."""
    stats = {}
    with contextlib.suppress(OSError):
        for task in (PROC / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                stats[pid, int(task.name)] = schedstat(task / "schedstat")
    return stats


class TreeRunDelay:
    """Seconds a process tree was starved since this was made: the time its threads waited for
    a CPU, but never more than the time the tree did not spend running. So a tree that waits only
    on itself (more of its threads runnable than there are CPUs: a server that spins in several
    processes) counts as running, not starved, and a server asleep while its child waits for a
    CPU counts as starved. Both are totals since the start, not per reading: the kernel adds a
    thread's wait when the thread next runs, all at once (a wait of seconds lands in one reading).

    A thread or process that has ended keeps its last reading; one that existed before counts
    only from then on; a thread id the kernel reuses keeps the larger reading. Not seen: a
    process that left the tree (its parent exited: a daemon's double fork), whose wait is then
    not counted, so the start errs towards failing."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._began = time.monotonic()
        self._before = self._now()  # what the threads alive now had run and waited already
        self._last = dict(self._before)
        self._starved = 0.0

    def _now(self) -> dict[Task, tuple[int, int]]:
        return {task: stat for pid in _descendants(self.pid) for task, stat in _schedstats(pid).items()}

    def seconds(self) -> float:
        for task, (task_ran, task_waited) in self._now().items():
            last_ran, last_waited = self._last.get(task, (0, 0))
            self._last[task] = (max(last_ran, task_ran), max(last_waited, task_waited))
        ran = waited = 0
        for task, (task_ran, task_waited) in self._last.items():
            before_ran, before_waited = self._before.get(task, (0, 0))
            ran, waited = ran + task_ran - before_ran, waited + task_waited - before_waited
        elapsed = time.monotonic() - self._began
        self._starved = max(self._starved, min(waited, elapsed * 1e9 - ran) / 1e9)  # never less than said before
        return self._starved

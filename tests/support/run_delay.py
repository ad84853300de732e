"""How long a process and everything it started have waited for a CPU, for waits that must not
count a starved start as a failed one (tests/support/server.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

PROC = Path("/proc")


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


def _thread_delays(pid: int) -> dict[tuple[int, int], int]:
    """Nanoseconds each thread of pid has waited runnable for a CPU, by (pid, thread id): the
    process's own schedstat is its main thread's alone."""
    delays = {}
    with contextlib.suppress(OSError):
        for task in (PROC / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                delays[pid, int(task.name)] = int((task / "schedstat").read_text().split()[1])
    return delays


class TreeRunDelay:
    """The run delay of a process tree, summed over its threads since this was made. A thread
    or process that has ended keeps the last reading taken of it (a starved grading process that
    started and exited still waited), and one that existed before keeps only what it waited
    after. (A thread id the kernel reuses for a new descendant keeps the larger reading.)
    Threads that wait at the same time each count, so the sum can exceed the wall time:
    callers cap it, and it errs towards calling a start starved rather than failed."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._before = self._now()  # what the threads alive now had waited already
        self._last = dict(self._before)

    def _now(self) -> dict[tuple[int, int], int]:
        return {task: delay for pid in _descendants(self.pid) for task, delay in _thread_delays(pid).items()}

    def seconds(self) -> float:
        for task, delay in self._now().items():
            self._last[task] = max(self._last.get(task, 0), delay)
        return sum(delay - self._before.get(task, 0) for task, delay in self._last.items()) / 1e9

"""Processes that contend for one CPU, for tests of who gets it (a starved start, an idle group)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

BUSY_LOOP = "while True: pass"


def first_cpu() -> int:
    return min(os.sched_getaffinity(0))


def on_one_cpu(argv: Sequence[str], nice: int = 0, procs_files: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """argv started on the first CPU this process may use, at niceness ``nice``, and placed in the
    given control groups before it runs (as a case's launcher places itself)."""
    def place() -> None:
        os.sched_setaffinity(0, {first_cpu()})
        # absolute, not relative to a niced pytest's (root may lower it): a hog at nice 10 beside
        # a server at 19 left the server an eighth of the CPU, and the starved-start tests proved
        # nothing
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except PermissionError:
            os.nice(max(0, nice - os.getpriority(os.PRIO_PROCESS, 0)))
        for procs in procs_files:
            Path(procs).write_text(str(os.getpid()))
    return subprocess.Popen(list(argv), preexec_fn=place)


def hog(nice: int = 0, procs_files: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """A CPU-bound Python process on the first CPU."""
    return on_one_cpu([sys.executable, "-c", BUSY_LOOP], nice, procs_files)

"""Who owns a directory or control group the sandbox leaves on the host, so that leftovers of a
killed service can be removed at the next start without touching those of a live one.

An owner is ``"<pid> <start time>"``: the start time (in clock ticks since boot, from
/proc/<pid>/stat) tells a reused pid from the process that wrote the mark."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

OWNER_FILE = ".owner"
STAGE_PREFIX = "scaling-grader-stage-"
CASE_PREFIX = "scaling-grader-case-"


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields count from the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


@cache
def _owner_of(pid: int) -> str:
    return f"{pid} {_start_time(pid)}"


def current_owner() -> str:
    return _owner_of(os.getpid())


def owner_alive(owner: str) -> bool | None:
    """True if the process named by owner still runs, False if not, None if unreadable."""
    try:
        pid_text, start = owner.split()
        pid = int(pid_text)
    except ValueError:
        return None
    return _start_time(pid) == start


def owned_tempdir(prefix: str, mode: int = 0o700) -> str:
    """A new directory under the temporary directory, marked with this process as its owner
    (root-owned, so a candidate working inside cannot rewrite the mark)."""
    path = tempfile.mkdtemp(prefix=prefix)
    os.chmod(path, mode)
    mark = os.path.join(path, OWNER_FILE)
    with open(mark, "w") as f:
        f.write(current_owner())
    os.chmod(mark, 0o644)
    return path


def remove_stale_dirs(base: str | None = None) -> list[str]:
    """Staging and case directories whose owner process is dead. Directories without a mark
    (made by an older version, possibly still running) are left alone."""
    base = base or tempfile.gettempdir()
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if not entry.name.startswith((STAGE_PREFIX, CASE_PREFIX)) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                owner = Path(entry.path, OWNER_FILE).read_text()
            except OSError:
                continue
            if owner_alive(owner) is False:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed

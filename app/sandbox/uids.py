"""Dedicated uids for children when the service runs as root: one uid per live child, so that
RLIMIT_NPROC counts that child's processes alone, ``kill(-1)`` from inside reaches exactly what
the case left behind, and two concurrent cases cannot signal or read each other."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

# Claims on uids are shared by every process on the host (several workers, or an API and a
# worker): a uid is held through an exclusive flock on its file here, which the kernel drops
# if the holder dies, so a killed worker's uids come back by themselves.
LOCK_DIR = Path("/run/scaling-grader/uids")
# Written into a uid's lock file by the holder that gave it back after seeing every process of
# it gone; any other content (a holder that died with the uid in use) means /proc must be
# searched for processes still running under it before the uid is handed out again.
_CLEAN = b"clean"


class UidPool:
    def __init__(self, base: int, count: int, lock_dir: Path = LOCK_DIR) -> None:
        self._free = list(range(base + count - 1, base - 1, -1))
        self._held: dict[int, int] = {}  # uid -> fd holding its lock
        self._lock = threading.Lock()
        self._dir = lock_dir
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _claim(self, uid: int) -> bool:
        fd = os.open(self._dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process on this host uses it now
            os.close(fd)
            return False
        clean = os.pread(fd, len(_CLEAN) + 1, 0) == _CLEAN
        # (a search of /proc costs milliseconds per child, tens of them on a busy host)
        if not clean and processes_of(uid):  # left running by a holder that died: not free yet
            os.close(fd)
            return False
        os.ftruncate(fd, 0)  # in use from now on, until given back clean
        self._held[uid] = fd
        return True

    def take(self) -> int:
        with self._lock:
            for _ in range(len(self._free)):
                uid = self._free.pop()
                if self._claim(uid):
                    return uid
                self._free.insert(0, uid)
            raise RuntimeError("no free sandbox uid")

    def give_back(self, uid: int) -> None:
        # Returned only after every process of the uid is gone (see launch.reap_uid), and
        # appended at the front so a uid rests as long as possible before reuse.
        with self._lock:
            fd = self._held.pop(uid, None)
            if fd is not None:
                os.pwrite(fd, _CLEAN, 0)
                os.close(fd)
            self._free.insert(0, uid)


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) pids whose real uid is uid. Zombies are left out: they run nothing,
    and bubblewrap's namespace init, orphaned when the sandbox ends, waits as one until the
    host's init reaps it."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line[:4] in ("Stat", "Uid:"))
        except (OSError, ValueError):
            continue
        state = fields.get("State", " ").split()[0]
        if state not in ("Z", "X") and int(fields.get("Uid", "-1 ").split()[0]) == uid:
            pids.append(int(entry))
    return pids

_pools: dict[tuple[int, int], UidPool] = {}
_pools_lock = threading.Lock()


def shared_uid_pool(base: int, count: int) -> UidPool:
    """One pool per range for the whole process: two sandboxes must never hand out one uid."""
    with _pools_lock:
        pool = _pools.get((base, count))
        if pool is None:
            pool = _pools[(base, count)] = UidPool(base, count)
        return pool

"""What a plain-tier case may leave on the host under its dedicated uid, and its removal.

The plain tier shares the host's /tmp, /var/tmp, /dev/shm and SysV IPC namespace. A case's uid
is reused by later cases (of other tenants), so anything it leaves there would be readable by
them and could fill shared memory. After each plain case, everything owned by its uid in those
places is removed: files and directories (looked for in the shared directories and in any
world-writable directory below them, the only places another uid's files can be created) and
SysV shared memory segments, semaphore sets and message queues."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
from functools import cache

SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
_MAX_DEPTH = 6
_IPC_RMID = 0
# /proc/sysvipc table -> (id column, uid columns, libc call)
_IPC_TABLES = {
    "shm": ("shmid", ("uid", "cuid"), "shmctl"),
    "sem": ("semid", ("uid", "cuid"), "semctl"),
    "msg": ("msqid", ("uid", "cuid"), "msgctl"),
}


def _remove(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _sweep(directory: str, uid: int, depth: int, removed: list[str]) -> None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid == uid:
            _remove(entry.path, st)
            removed.append(entry.path)
        elif stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH and depth < _MAX_DEPTH:
            _sweep(entry.path, uid, depth + 1, removed)


def remove_files_of(uid: int, dirs: tuple[str, ...] = SHARED_DIRS) -> list[str]:
    removed: list[str] = []
    for d in dirs:
        if os.path.isdir(d):
            _sweep(d, uid, 0, removed)
    return removed


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def ipc_objects_of(uid: int) -> list[tuple[str, int]]:
    """(table, id) of every SysV IPC object created by or owned by uid."""
    found = []
    for table, (id_col, uid_cols, _) in _IPC_TABLES.items():
        try:
            with open(f"/proc/sysvipc/{table}") as f:
                header = f.readline().split()
                rows = [line.split() for line in f]
        except OSError:
            continue
        cols = {name: i for i, name in enumerate(header)}
        for row in rows:
            with contextlib.suppress(KeyError, IndexError, ValueError):
                if any(int(row[cols[c]]) == uid for c in uid_cols):
                    found.append((table, int(row[cols[id_col]])))
    return found


def remove_ipc_of(uid: int) -> list[tuple[str, int]]:
    objects = ipc_objects_of(uid)
    libc = _libc()
    for table, ident in objects:
        call = getattr(libc, _IPC_TABLES[table][2])
        if table == "sem":
            call(ctypes.c_int(ident), ctypes.c_int(0), ctypes.c_int(_IPC_RMID))
        else:
            call(ctypes.c_int(ident), ctypes.c_int(_IPC_RMID), None)
    return objects


def remove_leftovers_of(uid: int) -> dict[str, int]:
    """Remove what uid left in the shared places; returns how many of each kind went."""
    files = remove_files_of(uid)
    ipc = remove_ipc_of(uid)
    return {"files": len(files), "ipc": len(ipc)}

"""What runs between the service and runsc (``python -I -S -B -c`` this file's text, by
app.sandbox.tiers.runsc.runsc_prefix): a private mount namespace in which every mount that holds
one of the given host paths, or lies under one, is remounted ``noatime``; then runsc, in place.

Why: gVisor's gofer reads the host's files for the sandbox, and a read updated a file's access
time on the host (relatime: the first read since the file last changed, or in a day), which gVisor
then showed every later case of the lane (its cached attributes are revalidated from the host):
one case reading eight chosen files carried a byte to the next. The gofer's binds of those paths,
made in this namespace, inherit the flag, so no read of theirs touches an access time; the
host's own mounts are untouched, and the namespace ends with runsc. Mounts are remounted where
they are (no bind is added, so nothing mounted under a path is covered), keeping their read-only,
nosuid, nodev, noexec and nosymfollow flags. A mount that holds or lies under a path and cannot be
remounted ends this program (exit 98) and with it the sandbox's start: never a sandbox with the
channel open.

Standard library only (the interpreter runs isolated). The system calls: unshare with
CLONE_NEWNS alone (the worker container's seccomp profile allows exactly that) and mount."""

from __future__ import annotations

import ctypes
import os
import re
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_NOSYMFOLLOW = 0x1, 0x2, 0x4, 0x8, 0x100
MS_REMOUNT, MS_NOATIME, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x400, 0x1000, 0x4000, 0x40000
# A bind remount sets a mount's flags to exactly those given: every per-mount flag mountinfo shows
# is kept (nosymfollow too: a reviewer's attack), but the access-time ones, which noatime replaces.
KEPT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
              "nosymfollow": MS_NOSYMFOLLOW}
FAILED = 98


def unescape(field: str) -> str:
    """A mountinfo path: the kernel writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(mountinfo: str) -> list[tuple[str, list[str]]]:
    """(mount point, its per-mount options) of each line of /proc/self/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 5:
            found.append((unescape(fields[4]), fields[5].split(",")))
    return found


def covers(point: str, path: str) -> bool:
    """Whether the mount at ``point`` holds ``path`` or lies under it."""
    inside = point.rstrip("/") + "/"
    return path == point or path.startswith(inside) or point.startswith(path.rstrip("/") + "/")


def remount_flags(options: list[str]) -> int:
    flags = MS_REMOUNT | MS_BIND | MS_NOATIME
    for option in options:
        flags |= KEPT_FLAGS.get(option, 0)
    return flags


def _fail(what: str, errno: int) -> None:
    sys.stderr.write(f"access times: {what}: {os.strerror(errno)}\n")
    sys.exit(FAILED)


def main(argv: list[str]) -> None:
    split = argv.index("--")
    paths, command = [os.path.realpath(p) for p in argv[:split]], argv[split + 1:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if libc.unshare(CLONE_NEWNS) != 0:
        _fail("unshare", ctypes.get_errno())
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:  # nothing of this reaches the host
        _fail("private mounts", ctypes.get_errno())
    with open("/proc/self/mountinfo") as f:
        table = mounts(f.read())
    for point, options in table:
        if not any(covers(point, path) for path in paths):
            continue
        if libc.mount(None, os.fsencode(point), None, remount_flags(options), None) != 0:
            _fail(f"remount {point}", ctypes.get_errno())
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])

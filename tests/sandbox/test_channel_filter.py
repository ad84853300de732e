"""The channel filter (app/sandbox/child/channels.py) as a program: its syscall numbers are the
kernel's (checked against libseccomp's tables), and in a fork of the test process it does what
docs/sandbox.md says for each call, and nothing to the calls next to them."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import app.sandbox
from tests.support.forked import report_from_fork

SOURCE = (Path(app.sandbox.__file__).parent / "child/channels.py").read_text()
SECCOMP_SOURCE = (Path(app.sandbox.__file__).parent / "child/seccomp.py").read_text()


def _part(source: str, name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace


@pytest.mark.parametrize("machine,arch", [("x86_64", b"x86_64"), ("aarch64", b"aarch64"), ("riscv64", b"riscv64")])
def test_syscall_numbers_are_libseccomps(machine: str, arch: bytes) -> None:
    lib = _part(SECCOMP_SOURCE, "child/seccomp.py")["load_libseccomp"]()
    if lib is None:
        pytest.fail("libseccomp is not installed (Debian: libseccomp2)")
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    token = lib.seccomp_arch_resolve_name(arch)
    assert token
    audit_arch, _, numbers = _part(SOURCE, "child/channels.py")["_ARCHES"][machine]
    assert audit_arch == token  # libseccomp's arch token is the AUDIT_ARCH value
    checked: list[bool] = []
    for name, nr in numbers.items():
        known = lib.seccomp_syscall_resolve_name_arch(token, name.encode())
        if known >= 0:  # (a libseccomp older than the call does not know it)
            assert known == nr, (machine, name, known, nr)
        checked.append(known >= 0)
    assert sum(checked) >= len(numbers) - 1, checked  # all but cachestat (Linux 6.5) at the least


def _in_fork(check: Callable[[], dict[str, Any]], *, filtered: bool) -> dict[str, Any]:
    ns = _part(SOURCE, "child/channels.py")

    def work() -> dict[str, Any]:
        if filtered:
            ns["install_channel_filter"]()
        seen = check()
        seen["closed"] = ns["channels_closed"]()
        return seen

    return report_from_fork(work)


def _errno_of(call: Callable[[], object]) -> int:
    try:
        call()
    except OSError as exc:
        return exc.errno or -1
    return 0


def _probe(tmp: str) -> Callable[[], dict[str, Any]]:
    def check() -> dict[str, Any]:
        libc = ctypes.CDLL(None, use_errno=True)
        watched = os.path.join(tmp, "watched")  # nothing is read in it (SIGIO would end the fork)
        os.makedirs(watched, exist_ok=True)
        fds = []
        for name in ("flock", "lockf", "ofd", "lease"):  # a file each: the kinds of lock conflict
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(b"x" * 4096)
            fds.append(os.open(path, os.O_RDONLY))  # a read lease needs no writer anywhere
        flock_fd, lockf_fd, ofd_fd, lease_fd = fds
        seen: dict[str, Any] = {
            "flock": _errno_of(lambda: fcntl.flock(flock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)),
            "lockf": _errno_of(lambda: fcntl.lockf(lockf_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)),
            "ofd": _errno_of(lambda: fcntl.fcntl(ofd_fd, fcntl.F_OFD_SETLK,
                                                 struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 0, 0))),
            "lease": _errno_of(lambda: fcntl.fcntl(lease_fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)),
            "notify": _errno_of(lambda: fcntl.fcntl(os.open(watched, os.O_RDONLY), fcntl.F_NOTIFY, fcntl.DN_ACCESS)),
            "nowait": _errno_of(lambda: os.preadv(flock_fd, [bytearray(1)], 0, os.RWF_NOWAIT)),
            "preadv_plain": _errno_of(lambda: os.preadv(flock_fd, [bytearray(1)], 0, 0)),
            "fadvise_willneed": _errno_of(lambda: os.posix_fadvise(flock_fd, 0, 0, os.POSIX_FADV_WILLNEED)),
            "getfl": _errno_of(lambda: fcntl.fcntl(flock_fd, fcntl.F_GETFL)),
            "dupfd": _errno_of(lambda: os.close(fcntl.fcntl(flock_fd, fcntl.F_DUPFD_CLOEXEC, 0))),
        }
        ctypes.set_errno(0)
        ino = libc.inotify_init1(0)
        seen["inotify"] = ctypes.get_errno() if ino < 0 else 0
        ctypes.set_errno(0)
        fan = libc.fanotify_init(0x200, os.O_RDONLY)
        seen["fanotify"] = ctypes.get_errno() if fan < 0 else 0
        # what /proc/locks shows of the three locks: one the filter let "succeed" is not there
        inodes = [os.fstat(fd).st_ino for fd in fds[:3]]
        with open("/proc/locks") as f:
            seen["locks_shown"] = sum(any(f":{ino} " in line for ino in inodes) for line in f)
        return seen
    return check


def test_the_filter_closes_each_channel_and_leaves_the_rest(tmp_path: Path) -> None:
    unfiltered = _in_fork(_probe(str(tmp_path)), filtered=False)
    filtered = _in_fork(_probe(str(tmp_path)), filtered=True)
    # Without it every one of these works (the test process is root: leases and fanotify too).
    assert unfiltered["closed"] is False and unfiltered["locks_shown"] >= 3, unfiltered
    assert {k: v for k, v in unfiltered.items() if k not in ("closed", "locks_shown")} == \
        dict.fromkeys(("flock", "lockf", "ofd", "lease", "notify", "nowait", "preadv_plain",
                       "fadvise_willneed", "getfl", "dupfd", "inotify", "fanotify"), 0), unfiltered
    assert filtered["closed"] is True
    # Locks: success, and no lock exists.
    assert filtered["flock"] == filtered["lockf"] == filtered["ofd"] == 0 and filtered["locks_shown"] == 0
    assert filtered["lease"] == filtered["notify"] == filtered["inotify"] == filtered["fanotify"] == errno.EPERM
    assert filtered["nowait"] == errno.EOPNOTSUPP
    # The calls beside them are untouched.
    assert filtered["preadv_plain"] == filtered["fadvise_willneed"] == filtered["getfl"] == filtered["dupfd"] == 0

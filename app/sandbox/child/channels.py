"""The channel filter: a small seccomp program, installed in every tier (with or without the
deny-list of child/seccomp.py), that closes the ways two concurrent cases could signal each
other through the files they both see. Stdlib only: part of the harness program.

Every tier shows each case the same read-only host files (the interpreter, the packages, the
system libraries); in the plain tier, the whole host. Reading is harmless, but a few kernel
facilities attach state to a file that another process can observe, whatever its namespaces and
uid: file locks (flock, POSIX and open-file-description locks, all listed in /proc/locks),
leases, change notification (inotify, fanotify, dnotify) and the page cache (a page evicted or
loaded by one case, probed without timing by another). Nothing in numpy, JAX or the exercises
needs any of these on a shared file, so:

* taking or dropping a lock (flock, fcntl F_SETLK/F_SETLKW/F_OFD_SETLK/F_OFD_SETLKW) succeeds
  and does nothing: a library that locks its own temporary file still runs, and no lock ever
  exists for another process to see (F_GETLK stays allowed: it can only report the host's own);
* leases, dnotify (fcntl F_SETLEASE, F_NOTIFY), inotify and fanotify are refused (EPERM);
* POSIX_FADV_DONTNEED does nothing (it would evict pages of a shared file), and the two probes
  of the page cache that need no clock, preadv2/pwritev2 with RWF_NOWAIT and cachestat, are
  refused (EOPNOTSUPP, EPERM);
* sockets of the stream protocols that make TCP connections without being TCP to Landlock
  (IPPROTO_MPTCP, IPPROTO_SMC, AF_SMC) are refused (EPERM): the plain tier's Landlock rules
  refuse TCP bind and connect only to a socket whose protocol is IPPROTO_TCP, and an MPTCP
  socket (which falls back to plain TCP with a peer that has no MPTCP) reached the host's
  loopback services (Redis, with the deployment's case secret) from a plain case without the
  deny-list, and let two concurrent plain cases talk;
* io_uring is refused (io_uring_setup, _enter, _register: EPERM): its operations make sockets
  (IORING_OP_SOCKET made the same MPTCP socket past the rule above), advise and read files
  without any of the calls this filter sees.

The deny-list is built with libseccomp, which a host may lack; this program is written out by
hand for the architectures the service runs on (x86-64, arm64, riscv64), so that no tier runs
without it. On another architecture the harness stops (fail closed)."""

import ctypes
import errno as _errno
import os as _os
import sys as _sys

_RET_ALLOW = 0x7FFF0000


def _ret_errno(code):
    return 0x00050000 | (code & 0xFFFF)


_NOOP = _ret_errno(0)  # the call returns 0 without running
_REFUSE = _ret_errno(_errno.EPERM)

# fcntl commands (the same numbers on every Linux architecture).
_LOCK_COMMANDS = (6, 7, 37, 38)  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW
_F_SETLEASE, _F_NOTIFY = 1024, 1026
_POSIX_FADV_DONTNEED = 4
_RWF_NOWAIT = 0x8
# Stream sockets Landlock's TCP rules do not see (security/landlock/net.c checks sk_is_tcp).
_AF_SMC, _IPPROTO_SMC, _IPPROTO_MPTCP = 43, 256, 262

# AUDIT_ARCH value, x32 bit (x86-64 only) and the numbers of the calls concerned, per machine.
_ARCHES = {
    "x86_64": (0xC000003E, True, {
        "fcntl": 72, "flock": 73, "inotify_init": 253, "inotify_add_watch": 254, "inotify_init1": 294,
        "fanotify_init": 300, "fanotify_mark": 301, "fadvise64": 221, "preadv2": 327, "pwritev2": 328,
        "cachestat": 451, "socket": 41,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}),
    "aarch64": (0xC00000B7, False, {
        "fcntl": 25, "flock": 32, "inotify_init1": 26, "inotify_add_watch": 27,
        "fanotify_init": 262, "fanotify_mark": 263, "fadvise64": 223, "preadv2": 286, "pwritev2": 287,
        "cachestat": 451, "socket": 198,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}),
    "riscv64": (0xC00000F3, False, {
        "fcntl": 25, "flock": 32, "inotify_init1": 26, "inotify_add_watch": 27,
        "fanotify_init": 262, "fanotify_mark": 263, "fadvise64": 223, "preadv2": 286, "pwritev2": 287,
        "cachestat": 451, "socket": 198,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}),
}
# The policy as data: what a whole call gets, and what a call gets for one argument's value
# (argument index, [("eq"|"set", value, action[, another argument's index]), ...]).
CHANNEL_CALLS = {
    "flock": _NOOP,
    "inotify_init": _REFUSE, "inotify_init1": _REFUSE, "inotify_add_watch": _REFUSE,
    "fanotify_init": _REFUSE, "fanotify_mark": _REFUSE, "cachestat": _REFUSE,
    "io_uring_setup": _REFUSE, "io_uring_enter": _REFUSE, "io_uring_register": _REFUSE,
}
CHANNEL_ARGUMENTS = {
    "fcntl": (1, [*(("eq", cmd, _NOOP) for cmd in _LOCK_COMMANDS),
                  ("eq", _F_SETLEASE, _REFUSE), ("eq", _F_NOTIFY, _REFUSE)]),
    "fadvise64": (3, [("eq", _POSIX_FADV_DONTNEED, _NOOP)]),
    "preadv2": (5, [("set", _RWF_NOWAIT, _ret_errno(_errno.EOPNOTSUPP))]),
    "pwritev2": (5, [("set", _RWF_NOWAIT, _ret_errno(_errno.EOPNOTSUPP))]),
    "socket": (2, [("eq", _IPPROTO_MPTCP, _REFUSE), ("eq", _IPPROTO_SMC, _REFUSE), ("eq", _AF_SMC, _REFUSE, 0)]),
}

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


def channel_program(machine=None):
    """The filter as (code, jt, jf, k) instructions of classic BPF, for machine (os.uname's)."""
    arch, x32, numbers = _ARCHES[machine or _os.uname().machine]
    prog = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _ret_errno(_errno.ENOSYS)),
            (_LD_W_ABS, 0, 0, 0)]
    if x32:  # x32 calls carry the x86-64 arch value with this bit set in the number: refused
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _ret_errno(_errno.ENOSYS))]
    for name, action in CHANNEL_CALLS.items():
        if name in numbers:
            prog += [(_JEQ, 0, 1, numbers[name]), (_RET, 0, 0, action)]
    for name, (index, tests) in CHANNEL_ARGUMENTS.items():
        block, loaded = [], None
        for kind, value, action, *other in tests:
            arg = other[0] if other else index
            if arg != loaded:  # the low 32 bits (little-endian machines; the kernel reads an int)
                block.append((_LD_W_ABS, 0, 0, 16 + 8 * arg))
                loaded = arg
            block += [(_JEQ if kind == "eq" else _JSET, 0, 1, value), (_RET, 0, 0, action)]
        block.append((_RET, 0, 0, _RET_ALLOW))
        prog += [(_JEQ, 0, len(block), numbers[name]), *block]
    prog.append((_RET, 0, 0, _RET_ALLOW))
    return prog


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


_CHANNEL_PROGRAM: list = []  # built once per process (the fork server's forks inherit it)
_LIBC: list = []


def _libc_handle():
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def prepare_channel_filter():
    """Build the program for this machine (OSError where there is none)."""
    _libc_handle()
    if not _CHANNEL_PROGRAM:
        try:
            prog = channel_program()
        except KeyError:
            raise OSError(f"no channel filter for {_os.uname().machine}") from None
        _CHANNEL_PROGRAM.append((_Instruction * len(prog))(*prog))


def install_channel_filter():
    """Load the channel filter into the calling process and its future children (after
    no_new_privs). Raises OSError if it cannot be; a no-op where there is no Linux seccomp."""
    if not _sys.platform.startswith("linux"):
        return
    prepare_channel_filter()
    insns = _CHANNEL_PROGRAM[0]
    fprog = _Program(len(insns), ctypes.cast(insns, ctypes.POINTER(_Instruction)))
    libc = _libc_handle()
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "the kernel refused the channel filter")


def channels_closed():
    """True when the channel filter answers in this process (inotify refused with EPERM), or
    where there is no Linux seccomp to install it."""
    if not _sys.platform.startswith("linux"):
        return True
    libc = _libc_handle()
    ctypes.set_errno(0)
    fd = libc.inotify_init1(0o2000000)  # IN_CLOEXEC
    if fd >= 0:
        _os.close(fd)
        return False
    return ctypes.get_errno() == _errno.EPERM
